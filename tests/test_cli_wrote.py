"""Every command that writes says what it wrote (issue #26, "CLI"): one line ``wrote WHAT to
WHERE`` naming the object and its id, or the file, in one shape across commands, and the same in
``--json`` as the field ``"wrote"``.

Each command of ``WRITES`` runs in process through ``typestrict_pipeline.cli.main`` on its own copy
of one temporary home (a SQLite store with credits, an API key, studies, a schedule, an outbox
message, a running backtest, a training awaiting predictions, a registered dataset), once as text
and once with ``--json``; the line must name what was written and where, and what it names must be
there. ``WRITES`` is checked against the commands the parser marks as writing
(``typestrict_pipeline.cli.common.writes``): a new command that writes cannot be added silently.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import re
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from typestrict_pipeline.cli import build_parser, main
from typestrict_pipeline.cli.common import is_writing

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

OWNER = "ana@example.com"
CUT = dt.datetime(2012, 3, 1, tzinfo=dt.UTC)  # the registered dataset "live" is known until then
LIMITS = ["--start", "2012-01-01", "--end", "2012-12-01", "--tune-steps", "20", "--eval-steps", "20",
          "--holdout-steps", "20", "--grid", "skill=0.5,0.6", "--max-candidates", "2",
          "--max-total-steps", "1000", "--synthetic"]


@dataclass(frozen=True)
class Home:
    """One copy of the base home, for one command."""

    path: Path
    key: str  # an API key id of workspace acme
    backtest: str  # a running backtest (its lease held by this process)
    training: str  # a training of acme awaiting its predictions

    @property
    def store(self) -> Path:
        return self.path / "store.db"


def _settled_model(home: Home) -> None:
    """A settled model ``tr_9`` of acme with its audit and files (under the home's trainings)."""
    from typestrict_pipeline.credits import SettlementRequest, settle_training
    from typestrict_pipeline.refund.audit import build_audit
    from typestrict_pipeline.refund.rule import judge
    from typestrict_pipeline.refund.synthetic import synthetic_decision
    from typestrict_pipeline.store import open_store

    judgement = judge([synthetic_decision(seed=3, n=60, n_answers=3)], keep_if_loses=True, resamples=100)
    audit = build_audit(judgement, training_id="tr_9", model_id="m9", jev_id="jev")
    files = home.path / "trainings" / "tr_9" / "model"
    files.mkdir(parents=True)
    (files / "weights.bin").write_bytes(b"w")
    engine = open_store(f"sqlite:///{home.store}")
    try:
        settle_training(engine, SettlementRequest(
            "acme", "tr_9", judgement.verdict, "r", keep_if_loses=True, model_dir=files,
            audit_json=json.dumps(audit, sort_keys=True).encode()),
            now=dt.datetime(2026, 6, 1, tzinfo=dt.UTC))
    finally:
        engine.dispose()


def _csv(home: Home) -> None:
    from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv

    write_seattle_csv(home.path / "fresh.csv", known_until=CUT)


@dataclass(frozen=True)
class Case:
    """A command that writes: its words, arguments, what its line says (a regular expression;
    ``{S}`` the store's file, ``{H}`` the home, ``{key}``, ``{bt}``, ``{tid}`` the base's ids), and
    a check that what it names was written."""

    words: str
    args: list[str]
    line: str
    setup: Callable[[Home], None] | None = None
    store: bool = True  # the command takes the case's --store

    def pattern(self, home: Home) -> str:
        return self.line.format(H=re.escape(str(home.path)), S=re.escape(str(home.store)), key=home.key,
                                bt=re.escape(home.backtest), tid=re.escape(home.training))


WRITES: dict[str, Case] = {c.words: c for c in (
    Case("api-key create", ["acme"], r"wrote API key [0-9a-f]{{16}} of workspace acme to the store {S}"),
    Case("api-key revoke", ["{key}"], r"wrote the revocation of API key {key} of workspace acme to the store {S}"),
    Case("credits grant", ["acme", "3", "--reference", "inv-9"],
         r"wrote ledger entry #\d+ \(grant \+3, workspace acme\) to the store {S}"),
    Case("credits spend", ["acme", "t-9"], r"wrote ledger entry #\d+ \(spend -1, workspace acme\) to the store {S}"),
    Case("credits adjust", ["acme", "-1", "--reference", "adj-1", "--reason", "fix"],
         r"wrote ledger entry #\d+ \(adjustment -1, workspace acme\) to the store {S}"),
    Case("credits expire", ["--now", "2099-01-01T00:00:00+00:00"],
         r"wrote the expiry of model\(s\) tr_9 \(their files deleted\) to the store {S} and {H}/trainings/tr_9/model",
         setup=_settled_model),
    Case("audit", ["tr_9", "-o", "{H}/audit.json"],
         r"wrote the audit of tr_9 to {H}/audit.json( \([\d,]+ bytes, SHA-256 [0-9a-f]{{64}}\); verdict \w+\. .+)?",
         setup=_settled_model),
    Case("store init", ["--store", "sqlite:///{H}/new.db"],
         r"wrote the tables of a new, empty store to the store {H}/new.db", store=False),
    Case("store upgrade", ["--store", "sqlite:///{H}/new.db"],
         r"wrote the store's tables \(schema revisions? \w+(, \w+)*\) to the store {H}/new.db", store=False),
    Case("backtest run", ["seattle_rain", "--start", "2015-01-01", "--end", "2015-01-05", "--workspace", "acme"],
         r"wrote backtest \S+ of seattle_rain @ \S+ \(5 steps\) to the store {S}"),
    Case("backtest cancel", ["{bt}"], r"wrote the cancellation of backtest {bt} to the store {S}"),
    Case("backtest activate", ["seattle_rain", "--param", "threshold=0.6", "--workspace", "acme"],
         r"wrote version \S+ of seattle_rain as the active one in workspace acme to the store {S}"),
    Case("run", ["seattle_rain", "--as-of", "2015-06-01T00:00:00Z", "--workspace", "acme"],
         r"wrote live decision \S+ of seattle_rain @ \S+ to the store {S}"),
    Case("study run", ["wx9", "--workspace", "acme", *LIMITS],
         r"wrote study 4 \(Finished\) of wx9 in workspace acme to the store {S}"),
    Case("study cancel", ["1"], r"wrote the cancellation of study 1 to the store {S}"),
    Case("study delete", ["3"], r"wrote the deletion of study 3 \(its candidates and runs\) to the store {S}"),
    Case("study promote", ["2"],
         r"wrote the winner's parameters of study 2 \{{\"skill\": 0\.\d+\}} as the configuration of wx2 in "
         r"workspace acme to the store {S}"),
    Case("study schedule enable", ["3", "--cadence", "1h", "--owner", OWNER],
         r"wrote schedule 2 \(re-runs study 3 every 1h\) to the store {S}"),
    Case("study schedule cancel", ["2", "--by", OWNER], r"wrote the cancellation of schedule 1 to the store {S}"),
    Case("schedule enable", ["3", "--cadence", "1h", "--owner", OWNER],
         r"wrote schedule 2 \(re-runs study 3 every 1h\) to the store {S}"),
    Case("schedule cancel", ["1", "--by", OWNER], r"wrote the cancellation of schedule 1 to the store {S}"),
    Case("schedule tick", ["--now", "2030-01-01T00:00:00Z"],
         r"wrote the evaluation of schedule\(s\) 1 to the store {S}"),
    Case("schedule data-arrived", ["acme", "wx2", "2013-06-01T00:00:00Z"],
         r"wrote the data end of acme/wx2, 2013-06-01T00:00:00\+00:00 to the store {S}"),
    Case("schedule workspace", ["acme", "--subscription", "ACTIVE", "--budget-usd", "50"],
         r"wrote the subscription state and the usage budget of workspace acme to the store {S}"),
    Case("schedule notifications", [OWNER, "--off"],
         r"wrote the notification 'A scheduled study changes its winner' turned off for ana@example.com "
         r"\(about every workspace's schedules\) to the store {S}"),
    Case("schedule deliver", [],
         r"wrote the delivery of message\(s\) 1 \(1 sent, 0 kept for retry, 0 given up\) to the store {S} "
         r"and {H}/notifications.log"),
    Case("data register", ["fresh", "--workflow", "seattle_rain", "--table", "weather={H}/fresh.csv"],
         r"wrote dataset fresh \(1 table\(s\), \d+ rows\) to {H}/datasets/fresh/weather.csv", setup=_csv),
    Case("data append", ["live", "{H}/more.csv"], r"wrote 10 new rows of live/weather to {H}/datasets/live/weather.csv"),
    Case("training submit", ["{tid}", "{H}/predictions.jsonl"],
         r"wrote the predictions of training {tid} \(now judging\) to the store {S} and "
         r"{H}/trainings/{tid}/predictions/model.jsonl"),
    Case("training cancel", ["{tid}"],
         r"wrote the cancellation of training {tid} \(its credit came back\) to the store {S}"),
    Case("training expire", ["--now", "2099-01-01T00:00:00Z"],
         r"wrote the expiry of training\(s\) {tid} to the store {S}"),
)}


def _commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[
        tuple[str, argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(words), parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _commands(sub, (*words, name))


def test_every_command_marked_as_writing_is_checked_here_and_only_those() -> None:
    marked = {words for words, p in _commands(build_parser()) if is_writing(p)}
    assert len(WRITES) == 31  # one case per command (a duplicate name would hide one)
    assert marked == set(WRITES)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    """The home every command's copy starts from."""
    from typestrict_pipeline.api.keys import create_api_key
    from typestrict_pipeline.api.trainings import TrainingRequest, TrainingStore
    from typestrict_pipeline.backtest.metering import PriceTable
    from typestrict_pipeline.backtest.store import BacktestRecorder
    from typestrict_pipeline.backtest.workflows import default_registry
    from typestrict_pipeline.backtest.workflows.datasets import register_dataset
    from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv
    from typestrict_pipeline.credits import CreditLedger
    from typestrict_pipeline.reruns.notify import KIND_WINNER_CHANGED, enqueue
    from typestrict_pipeline.reruns.service import enable_schedule
    from typestrict_pipeline.reruns.studies import StoreStudies
    from typestrict_pipeline.store import open_store, session_scope
    from typestrict_pipeline.study.form import StudyForm, study_config
    from typestrict_pipeline.study.runner import run_study_local
    from typestrict_pipeline.study.service import create_study_from_config, study_backend
    from typestrict_pipeline.study.tables import StudyRow

    root = tmp_path_factory.mktemp("wrote")
    home = root / "home"
    home.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TYPESTRICT_HOME", str(home))
        for name in ("TYPESTRICT_STORE_URL", "TYPESTRICT_DATASETS_DIR", "DAGSTER_HOME"):
            mp.delenv(name, raising=False)
        engine = open_store(f"sqlite:///{home / 'store.db'}")
        CreditLedger(engine).grant("acme", 5, reference="inv-0")
        key = create_api_key(engine, "acme", label="laptop").info.key_id

        def form(workflow: str) -> StudyForm:
            return StudyForm(workflow=workflow, start="2012-01-01", end="2012-12-01", tune_steps=20,
                             eval_steps=20, holdout_steps=20, grid=["skill=0.5,0.6"], synthetic=True,
                             max_candidates=2, max_total_steps=1000, workspace="acme", min_unseen_steps=5)

        assert create_study_from_config(engine, study_config(form("wx"))) == 1  # pending
        for sid, workflow in ((2, "wx2"), (3, "wx3")):  # finished, with a USD budget
            assert create_study_from_config(engine, study_config(form(workflow))) == sid
            run_study_local(engine, sid, study_backend(engine, sid))
            with session_scope(engine) as s:
                row = s.get(StudyRow, sid)
                assert row is not None
                row.budget_micro = 1_000_000
        enable_schedule(engine, StoreStudies(engine), study_id="2", cadence="1d", owner=OWNER)  # schedule 1
        enqueue(engine, dedupe_key="m1", kind=KIND_WINNER_CHANGED, recipient=OWNER, subject="s", body="b")
        start = dt.datetime(2015, 1, 1, tzinfo=dt.UTC)
        recorder = BacktestRecorder(  # running: its lease names this (live) process
            engine, workspace="acme", workflow=default_registry().active("seattle_rain"), start=start,
            end=start + dt.timedelta(days=9), step=dt.timedelta(days=1), steps_planned=10,
            dataset="seattle_weather", prices=PriceTable())
        recorder.lease.stop()
        csv, jev = support.make_dataset(root, seed=3)
        trainings = TrainingStore(home, engine, {"kind": "file", "path": str(jev)})
        trainings.area("acme").save("reviews.csv", csv)
        body = support.TRAINING_BODY
        tid = trainings.create("acme", TrainingRequest(dataset=body["dataset"], decisions=body["decisions"],
                                                       options=body["options"]))
        (home / "predictions.jsonl").write_text(
            "".join(json.dumps(p) + "\n" for p in support.model_predictions(csv, skill=0.9)))
        write_seattle_csv(home / "start.csv", known_until=CUT)
        register_dataset("live", "seattle_rain", {"weather": home / "start.csv"})
        write_seattle_csv(home / "more.csv", known_after=CUT, known_until=CUT + dt.timedelta(days=10))
        engine.dispose()
    yield Home(home, key, recorder.id, str(tid))


@pytest.fixture
def home(base: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    """A copy of the base home, as the environment's home."""
    copy = tmp_path / "home"
    shutil.copytree(base.path, copy)
    monkeypatch.setenv("TYPESTRICT_HOME", str(copy))
    for name in ("TYPESTRICT_STORE_URL", "TYPESTRICT_DATASETS_DIR", "DAGSTER_HOME", "TYPESTRICT_NOTIFY_TRANSPORT",
                 "TYPESTRICT_NOTIFY_FILE", "TYPESTRICT_USER"):
        monkeypatch.delenv(name, raising=False)
    return Home(copy, base.key, base.backtest, base.training)


def _written(case: Case, home: Home, ids: list[str], files: list[str]) -> None:
    """What the line names is there."""
    for f in files:  # an expiry deletes the model's files; every other command wrote them
        assert Path(f).exists() is (case.words != "credits expire"), f
    if case.words == "api-key create":
        conn = sqlite3.connect(home.store)
        try:
            assert [r[0] for r in conn.execute("SELECT key_id FROM api_keys WHERE key_id != ?", (home.key,))] == ids
        finally:
            conn.close()


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("words", sorted(WRITES))
def test_a_command_that_writes_says_what_it_wrote(
    words: str, as_json: bool, home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    case = WRITES[words]
    if case.setup is not None:
        case.setup(home)
    argv = [*words.split(), *(a.format(H=home.path, key=home.key, bt=home.backtest, tid=home.training)
                               for a in case.args)]
    argv += (["--store", f"sqlite:///{home.store}"] if case.store else []) + (["--json"] if as_json else [])
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    expected = case.pattern(home)
    if not as_json:
        said = [line for line in out.splitlines() if line.startswith("wrote ")]
        assert len(said) == 1, out
        assert re.fullmatch(expected, said[0]), (said[0], expected)
        return
    shown: Any = json.loads(out)
    wrote = shown["wrote"]
    assert set(wrote) == {"what", "ids", "store", "files"} and wrote["ids"], wrote
    # the same words as the line: WHAT, then WHERE (the store by its file, then the files)
    where = " and ".join([*([f"the store {wrote['store'].removeprefix('sqlite:///')}"] if wrote["store"] else []),
                          *wrote["files"]])
    assert re.fullmatch(expected, f"wrote {wrote['what']} to {where}"), (wrote, expected)
    assert wrote["store"] in (None, f"sqlite:///{home.store}", f"sqlite:///{home.path / 'new.db'}")
    _written(case, home, wrote["ids"], wrote["files"])


def test_a_command_with_nothing_to_write_says_it_wrote_nothing(
    home: Home, capsys: pytest.CaptureFixture[str]
) -> None:
    """A repeat (the same --reference, a key or schedule already off) or a sweep with nothing due
    writes nothing and says so, never claiming the first write again."""
    store = ["--store", f"sqlite:///{home.store}"]
    nothing = f"wrote nothing to the store {home.store}: "
    repeats = [["credits", "grant", "acme", "5", "--reference", "inv-0"],
               ["api-key", "revoke", home.key], ["schedule", "cancel", "1", "--by", OWNER]]
    for argv in repeats[1:]:  # the first time writes
        assert main([*argv, *store]) == 0
    capsys.readouterr()
    for argv, why in zip([*repeats, ["training", "expire"], ["store", "upgrade"]], [
            "ledger entry #1 of reference inv-0 was written before, at 20",
            f"API key {home.key} was revoked before at 20",
            "schedule 1 was cancelled already",
            "no training was past its deadline",
            "its schema is current (revision"], strict=True):
        assert main([*argv, *store]) == 0
        said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("wrote ")]
        assert len(said) == 1 and said[0].startswith(nothing + why), (argv, said)
        assert main([*argv, *store, "--json"]) == 0
        out = capsys.readouterr().out
        wrote = json.loads(out)["wrote"]
        assert wrote["ids"] == [] and wrote["what"].startswith(why), (argv, wrote)
