"""``typestrict study ...``: run (on Dagster, in process), leaderboard, list, cancel, promote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from typestrict_pipeline.cli import main

RUN = ["study", "run", "wx", "--synthetic", "--new-store", "--start", "2012-01-01", "--end", "2012-12-01",
       "--folds", "2", "--tune-steps", "20", "--eval-steps", "20", "--holdout-steps", "20",
       "--grid", "skill=0.5,0.8,0.55"]


def test_study_cli_refuses_without_limits_then_runs_and_shows_the_leaderboard(
        typestrict_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert main([*RUN, "--max-candidates", "3"]) == 2
    assert "expected Max total steps (a whole number ≥ 1), got nothing" in capsys.readouterr().err
    assert main([*RUN, "--max-candidates", "3", "--max-total-steps", "1000",
                 "--budget-usd", "0.01"]) == 2
    assert "Run one, then try again, or leave the USD budget empty." in capsys.readouterr().err
    assert main([*RUN, "--max-candidates", "2", "--max-total-steps", "1000",
                 "--min-unseen-steps", "0"]) == 2
    assert "expected Min unseen steps for a re-run as a whole number ≥ 1, got 0" in capsys.readouterr().err
    assert main([*RUN, "--max-candidates", "2", "--max-total-steps", "1000",
                 "--min-unseen-steps", "7"]) == 0
    out = capsys.readouterr().out
    assert "| State | Budget reached (limit: Max candidates) |" in out
    assert "3 planned / 2 run / 1 discarded (1 not run: Max candidates reached)" in out
    assert main(["study", "leaderboard", "1", "--json"]) == 0
    board = json.loads(capsys.readouterr().out)
    assert board["state"] == "BUDGET_REACHED" and board["holdout_score"] is not None
    assert board["min_unseen_steps"] == 7  # set when the study is created
    assert main(["study", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[1].split() == ["id", "name", "workspace", "workflow", "state", "stopped", "by", "spend", "budget"]
    # a study run without --name gets one (what it searches, on which data), then its workspace
    assert listed[3].split()[:2] == ["1", "wx:"] and "2012-01-01 to 2012-12-01" in listed[3]
    assert listed[3].split()[-8:-3] == ["demo", "wx", "Budget", "reached", "Max"]
    assert main(["study", "promote", "1"]) == 0
    assert "nothing to activate" in capsys.readouterr().out
    # --json: the API's answer's keys (POST /v1/studies/{id}/promote), plus what it wrote
    assert main(["study", "promote", "1", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert {k: said[k] for k in ("study_id", "promoted", "version_id")} == {
        "study_id": 1, "promoted": "parameters", "version_id": None}
    assert set(said["params"]) == {"skill"} and said["message"].startswith("Gate passed") and "wrote" in said
    assert main(["study", "leaderboard", "99"]) == 2
    assert "expected an existing study id, got 99" in capsys.readouterr().err
    assert main(["study", "cancel", "1"]) == 2  # it has ended: nothing to cancel (lifecycle's reaper)
    err = capsys.readouterr().err
    assert "got study 1 Budget reached" in err and "It has ended already: nothing to cancel" in err


def test_a_study_run_started_in_the_background_can_still_be_stopped_with_kill(
        typestrict_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A shell without job control starts a background command with SIGINT ignored, and
    Dagster's in-process run ends by giving SIGTERM SIGINT's handler: without care, `kill` would
    no longer stop the command (nor anything it started afterwards). ``study run`` keeps its own
    SIGTERM handler, which stops it like Ctrl-C with the SIGTERM message (exit 143)."""
    import signal

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `typestrict study run ... &` in a script
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the suite gives both back after the test
    assert main([*RUN, "--max-candidates", "2", "--max-total-steps", "1000"]) == 0
    capsys.readouterr()
    handler = signal.getsignal(signal.SIGTERM)
    assert handler not in (signal.SIG_IGN, signal.SIG_DFL, None), handler
    assert callable(handler)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        handler(signal.SIGTERM, None)
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # what the shell chose stays


def test_a_study_whose_run_cannot_start_ends_failed_with_why_and_frees_its_workflow(
        typestrict_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``study run`` creates the study (which takes the workflow's lock), then launches its run on
    the Dagster instance; when no run can start there (here DAGSTER_HOME is not a folder Dagster
    can use: a relative path, a missing folder, a dagster.yaml that is not YAML), the study never
    started: it ends FAILED with why, its lock, lease and reservations released, so the workflow
    is free for the next study. The command says so in the product's message (exit 2), not "This is a bug" (what a
    DAGSTER_HOME Dagster refused used to print)."""
    from sqlalchemy import select

    from typestrict_pipeline.lifecycle.leases import LeaseKind, holder
    from typestrict_pipeline.store import open_store, session_scope
    from typestrict_pipeline.study import repository as repo
    from typestrict_pipeline.study.tables import RunRow, StudyRow

    not_yaml = typestrict_home / "not-yaml"
    not_yaml.mkdir()
    (not_yaml / "dagster.yaml").write_text("telemetry: [\n", encoding="utf-8")
    for sid, dagster_home in ((1, "relative/dagster_home"), (2, str(typestrict_home / "no-such-folder")),
                              (3, str(not_yaml))):
        monkeypatch.setenv("DAGSTER_HOME", dagster_home)
        code = main([*RUN, "--max-candidates", "2", "--max-total-steps", "1000"])
        err = capsys.readouterr().err
        assert code == 2, err  # study 2 could be created at all: study 1's lock was released
        assert f"typestrict: study {sid} never started; marked failed and its workflow's lock released" in err
        assert "typestrict: expected DAGSTER_HOME as the absolute path of a Dagster instance's folder" in err
        assert repr(dagster_home) in err and "Set DAGSTER_HOME to the instance's folder, or unset it" in err
        assert "Traceback" not in err and "This is a bug" not in err
        engine = open_store(f"sqlite:///{typestrict_home / 'store.db'}")
        try:
            with session_scope(engine) as s:
                study = s.get(StudyRow, sid)
                assert study is not None and study.state == "FAILED", study and study.state
                assert study.started_at is None  # never started
                assert (study.error or "").startswith("its study_job run could not start: expected DAGSTER_HOME")
                assert study.reserved_micro == 0 and study.steps_reserved == 0
                assert s.execute(select(RunRow).where(RunRow.study_id == sid)).first() is None  # nothing reserved
            assert repo.active_study(engine, "demo", "wx") is None  # the workflow's lock: released
            assert holder(engine, LeaseKind.STUDY, str(sid)) is None
        finally:
            engine.dispose()


def test_a_grid_parameter_given_twice_is_refused_not_replaced(
        typestrict_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*RUN, "--grid", "skill=0.7", "--max-candidates", "2", "--max-total-steps", "1000"]) == 2
    err = capsys.readouterr().err
    assert "expected each parameter once in --grid, got skill twice (the second skill='0.7')" in err
    assert main(["study", "list"]) != 0 or "wx" not in capsys.readouterr().out  # nothing created


def test_a_study_cancelled_from_another_command_while_it_runs_exits_3(
        typestrict_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``study run`` exits as ``backtest run`` does for the same end (docs/cli.md, "Exit codes"):
    a study cancelled elsewhere (``typestrict study cancel``, the API, the console) while it ran
    exits 3 with why on stderr, never 0 as if it had finished (before: 0)."""
    import threading
    import time

    from typestrict_pipeline.cli.common import EXIT_CANCELLED
    from typestrict_pipeline.lifecycle.reaper import cancel_study
    from typestrict_pipeline.store import open_store, session_scope
    from typestrict_pipeline.study.tables import StudyRow

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    cancelled: list[str] = []

    def cancel_once_running() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.05)  # polls the store until the study runs, then cancels it
            if not (tmp_path / "store.db").exists():
                continue
            eng = open_store(url)
            try:
                with session_scope(eng) as s:
                    row = s.get(StudyRow, 1)
                    running = row is not None and row.state == "RUNNING"
                if running:
                    cancelled.append(cancel_study(eng, 1).why)
                    return
            except Exception:  # the store is being created: read it again
                continue
            finally:
                eng.dispose()

    helper = threading.Thread(target=cancel_once_running)
    helper.start()
    try:  # the command in the main thread (it keeps its own signal handlers)
        code = main(["study", "run", "seattle_rain", "--start", "2014-01-01", "--end", "2015-12-31",
                     "--folds", "2", "--tune-steps", "30", "--eval-steps", "20", "--holdout-steps", "30",
                     "--grid", "threshold=0.4,0.6", "--max-candidates", "2", "--max-total-steps", "10000",
                     "--standin-latency", "0.05", "--max-in-flight", "1", "--store", url, "--new-store"])
    finally:
        helper.join(timeout=130)
    captured = capsys.readouterr()
    assert cancelled and cancelled[0].startswith("cancelled at ")
    assert "| State | Cancelled" in captured.out
    assert code == EXIT_CANCELLED == 3, captured.err
    assert captured.err.startswith("typestrict: study 1 was cancelled while it ran; what ran is kept"), captured.err


@pytest.mark.parametrize("flag", ["--holdout-steps", "--eval-steps"])
def test_a_scored_window_of_one_step_is_refused_naming_the_flag(
        typestrict_home: Path, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI's refusals name its flags: ``--holdout-steps 1`` was refused as "expected
    holdout_steps to be a whole number ≥ 2 … Set holdout_steps to at least 2" (the API's field)."""
    argv = list(RUN)
    argv[argv.index(flag) + 1] = "1"
    assert main([*argv, "--max-candidates", "2", "--max-total-steps", "1000"]) == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: expected a number of steps from 2 to 10,000,000, got '1'" in err, err
    assert "holdout_steps" not in err and "eval_steps" not in err and "Traceback" not in err
