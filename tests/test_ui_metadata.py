"""What the Dagster UI shows: pictures in the materialization metadata, numbers rounded for
reading, "not measured" checks for a failed training, the product's message as a run's failure
reason, the demo's Jev stand-in started on demand, and a leaderboard that can be materialized."""

import base64
import datetime as dt
import importlib.util
import re
import socket
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from assets.refund import REFUND_ASSETS, REFUND_CHECKS, verdict_job
from assets.reruns import lineage_picture_markdown
from assets.studies import LEADERBOARD_KEY, study_job, study_leaderboard, study_run_config
from resources.refund import ManifestSourceClientResource, RefundTrainingsResource
from resources.store import StoreResource
from resources.studies import StudyRunnerResource
from typestrict_pipeline.demo_data.lexicon import JEV_STANDIN_MODEL, jev_standin_server
from typestrict_pipeline.plots import PNG_SIGNATURE
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.reruns.lineage import LineageEntry, summarize
from typestrict_pipeline.store import open_store
from typestrict_pipeline.study.repository import LastBacktest
from typestrict_pipeline.study.service import StudyConfig, create_study_from_config
from typestrict_pipeline.study.space import SearchSpace

_SUPPORT = Path(__file__).with_name("test_refund_assets_support.py")
_spec = importlib.util.spec_from_file_location("test_refund_assets_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)
support.ANSWERS["review"] = ("fresh", "rotten")  # answers the demo's Jev stand-in knows (this copy only)

_IMAGE = re.compile(r"!\[[^\]]*\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)")


def picture(value: object) -> bytes:
    """The PNG embedded in a Markdown metadata value (fails if there is none)."""
    m = _IMAGE.fullmatch(str(value))
    assert m is not None, f"expected one embedded PNG, got {str(value)[:80]!r}"
    png = base64.b64decode(m.group(1))
    assert png.startswith(PNG_SIGNATURE)
    return png


def run_training(home: Path, training_id: str, *, raise_on_error: bool = True) -> dg.ExecuteInProcessResult:
    resources: dict[str, Any] = {
        "refund_trainings": RefundTrainingsResource(
            folder=str(home / "trainings"), audits_folder=str(home / "audits")),
        "refund_jev_client": ManifestSourceClientResource(max_workers=2),
        "refund_model_client": ManifestSourceClientResource(max_workers=1),
        "store": StoreResource(url=f"sqlite:///{home / 'store.db'}"),
    }
    defs = dg.Definitions(assets=list(REFUND_ASSETS), asset_checks=list(REFUND_CHECKS),
                          jobs=[verdict_job], resources=resources)
    with dg.DagsterInstance.ephemeral() as instance:  # disposed: not left to the garbage collector
        instance.add_dynamic_partitions("trainings", [training_id])
        return defs.resolve_job_def("verdict_job").execute_in_process(
            partition_key=training_id, instance=instance, raise_on_error=raise_on_error)


def metadata_of(result: dg.ExecuteInProcessResult, key: str) -> dict[str, Any]:
    [mat] = [m for m in result.get_asset_materialization_events() if m.asset_key == dg.AssetKey(key)]
    return {k: v.value for k, v in mat.materialization.metadata.items()}


def _dead_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_verdict_shows_its_bootstrap_and_metrics_pictures_and_rounded_numbers(tmp_path: Path) -> None:
    support.make_training(tmp_path / "trainings", "tr_pics", model_skill=0.95, jev_skill=0.55)
    result = run_training(tmp_path, "tr_pics")
    judgement = result.output_for_node("verdict")
    report = judgement.decisions[0]
    meta = metadata_of(result, "verdict")
    boot = picture(meta["bootstrap of G"])
    assert meta["G"] == round(report.gain, 4) and meta["G q05"] == round(report.bootstrap.q05, 4)
    assert meta["G"] != report.gain or report.gain == round(report.gain, 4)
    metrics_meta = metadata_of(result, "metrics")
    bars = picture(metrics_meta["sentiment: picture"])
    assert boot != bars
    seconds = metadata_of(result, "jev_predictions")["seconds"]
    assert seconds == round(seconds, 2)
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert checks["gain_is_real"].metadata["sentiment: q05"].value == round(report.bootstrap.q05, 4)


def test_a_failed_trainings_checks_say_not_measured_without_failing(tmp_path: Path) -> None:
    support.make_training(tmp_path / "trainings", "tr_oom", status="failed")
    result = run_training(tmp_path, "tr_oom")
    assert result.output_for_node("verdict").verdict is Verdict.FAILED
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert set(checks) == {"gain_is_real", "nothing_collapses"}
    for check in checks.values():
        assert check.passed
        assert check.description == "not measured: the training failed (the trainer ran out of memory)"
        assert check.metadata["measured"].value is False


def test_the_demos_jev_stand_in_is_started_when_its_server_is_gone(tmp_path: Path) -> None:
    """A demo partition re-materialized after the demo: its manifest names a dead port."""
    gone = {"kind": "openai", "base_url": f"http://127.0.0.1:{_dead_port()}/v1",
            "model": JEV_STANDIN_MODEL, "api_key_env": "TYPESTRICT_DEMO_JEV_KEY_NOT_SET",
            "max_attempts": 1}
    support.make_training(tmp_path / "a" / "trainings", "tr_demo", n=80, seed=5, jev=gone,
                          decisions=("review",))
    later = run_training(tmp_path / "a", "tr_demo")
    assert later.success
    with jev_standin_server() as server:  # the same training while the demo's server is up
        live = {**gone, "base_url": server.base_url, "api_key_env": None}
        support.make_training(tmp_path / "b" / "trainings", "tr_demo", n=80, seed=5, jev=live,
                              decisions=("review",))
        during = run_training(tmp_path / "b", "tr_demo")
        served = server.served
    assert served == 16  # 20% of 80 test examples: the demo's own server answered then
    a, b = later.output_for_node("verdict"), during.output_for_node("verdict")
    assert a.verdict is b.verdict
    assert [r.gain for r in a.decisions] == [r.gain for r in b.decisions]
    assert later.output_for_node("jev_predictions").system_id == JEV_STANDIN_MODEL
    assert later.output_for_node("jev_predictions").label == "Jev (demo stand-in)"  # as the demo says


def test_a_run_that_fails_shows_the_products_message_as_its_failure_reason(tmp_path: Path) -> None:
    down = {"kind": "openai", "base_url": f"http://127.0.0.1:{_dead_port()}/v1",
            "model": "some-real-model", "api_key_env": None, "max_attempts": 1, "timeout_s": 5}
    support.make_training(tmp_path / "trainings", "tr_down", n=40, jev=down)
    result = run_training(tmp_path, "tr_down", raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert failure.step_key == "dataset"  # checked before the first asset is stored
    user = failure.step_failure_data.user_failure_data
    assert user is not None and user.description is not None
    assert "expected an endpoint that answers HTTP" in user.description
    assert "Traceback" not in user.description
    assert user.metadata["error"].value == "ManifestError"
    error = failure.step_failure_data.error
    assert error is not None and error.cause is None  # no chained stack trace under the message
    # the UI prints "Stack Trace:" under the message whenever the recorded error has frames
    assert error.stack == [] and error.message == user.description
    assert error.cls_name == "ManifestError"


def test_the_verdict_says_why_in_native_metadata(tmp_path: Path) -> None:
    """The sentence, G, q05, the settling decision and every decision's numbers are text, float
    and table values, which the UI shows as they are (Markdown sits behind "Show Markdown")."""
    support.make_training(tmp_path / "trainings", "tr_why", model_skill=0.95, jev_skill=0.55,
                          decisions=("review", "topic"))
    result = run_training(tmp_path, "tr_why")
    judgement = result.output_for_node("verdict")
    [mat] = [m for m in result.get_asset_materialization_events() if m.asset_key == dg.AssetKey("verdict")]
    meta = mat.materialization.metadata
    assert isinstance(meta["why"], dg.TextMetadataValue)
    assert meta["why"].value.startswith("The credit stays spent: the model beat Jev on 2 of 2 decisions")
    assert isinstance(meta["settling_decision"], dg.TextMetadataValue)
    assert meta["settling_decision"].value == judgement.settling_decision == "review"
    for r in judgement.decisions:
        assert isinstance(meta[f"{r.name}: G"], dg.FloatMetadataValue)
        assert meta[f"{r.name}: G q05"].value == round(r.bootstrap.q05, 4)
    table = meta["decisions"]
    assert isinstance(table, dg.TableMetadataValue)
    rows = [rec.data for rec in table.records]
    assert [row["decision"] for row in rows] == ["review", "topic"]
    assert all(row["beats Jev"] is True and str(row["why"]).startswith("better than Jev") for row in rows)
    assert next(iter(meta)) == "why"  # first, where the eye lands
    metrics = [m for m in result.get_asset_materialization_events() if m.asset_key == dg.AssetKey("metrics")]
    assert isinstance(metrics[0].materialization.metadata["review: metrics"], dg.TableMetadataValue)


def _study(engine: Any) -> int:
    utc = dt.UTC
    config = StudyConfig(
        workspace="demo", workflow="wx", workflow_version="v1",
        space=SearchSpace(grid={"skill": [0.5, 0.52, 0.54]}),
        start=dt.datetime(2012, 1, 1, tzinfo=utc), end=dt.datetime(2012, 12, 1, tzinfo=utc),
        step=dt.timedelta(days=1), n_folds=2, tune_steps=15, eval_steps=15, holdout_steps=15,
        max_candidates=3, max_total_steps=100_000, budget_micro=None,
        backend={"backend": "synthetic", "cost_per_step": 3},
    )
    return create_study_from_config(engine, config, last_backtest=LastBacktest(30, 10))


@pytest.mark.slow
def test_the_leaderboard_has_a_picture_and_can_be_materialized_again(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    sid = _study(engine)
    resources = {"store": StoreResource(url=sqlite_url), "study_runner": StudyRunnerResource()}
    with dg.instance_for_test() as instance:
        ran = study_job.execute_in_process(run_config=study_run_config(sid), instance=instance,
                                           resources=resources)
        [recorded] = ran.asset_materializations_for_node("study_finalize")
        again = dg.materialize([study_leaderboard], partition_key=str(sid), instance=instance,
                               resources=resources)
        assert again.success
        [redrawn] = again.asset_materializations_for_node("study_leaderboard")
        assert redrawn.asset_key == LEADERBOARD_KEY and redrawn.partition == str(sid)
        assert picture(redrawn.metadata["picture"].value) == picture(recorded.metadata["picture"].value)
        assert redrawn.metadata["leaderboard"] == recorded.metadata["leaderboard"]
        score = redrawn.metadata["holdout_score"].value
        assert isinstance(score, float) and score == round(score, 4)
        instance.add_dynamic_partitions("study_ids", ["999"])
        missing = dg.materialize([study_leaderboard], partition_key="999", instance=instance,
                                 resources=resources, raise_on_error=False)
        assert not missing.success
        [failure] = [e for e in missing.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
        user = failure.step_failure_data.user_failure_data
        assert user is not None and "999" in (user.description or "")
    engine.dispose()


def test_the_lineage_picture_draws_every_scored_re_run() -> None:
    entries = [
        LineageEntry(0, "1", "FINISHED", "w0", "a", 0.52, 0.50, 0.01, None),
        LineageEntry(1, "2", "FINISHED", "w1", "b", 0.55, 0.50, 0.01, True),
        LineageEntry(2, None, "RUNNING", "w2", None, None, None, None, None),
    ]
    one = picture(lineage_picture_markdown(entries, summarize(entries)))
    moved = [*entries[:1], LineageEntry(1, "2", "FINISHED", "w1", "b", 0.60, 0.50, 0.01, True), entries[2]]
    assert picture(lineage_picture_markdown(moved, summarize(moved))) != one


@pytest.mark.parametrize("workflow", ["seattle_rain"])
def test_a_backtest_shows_its_score_over_time_picture(tmp_path: Path, workflow: str) -> None:
    from assets.backtests import build_defs
    from resources.backtests import StandinBacktestModels

    defs = dg.Definitions.merge(build_defs(), dg.Definitions(resources={
        "store": StoreResource(url=f"sqlite:///{tmp_path / 'store.db'}"),
        "backtest_models": StandinBacktestModels(latency_s=0.0),
    }))
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(f"backtest_{workflow}_job").execute_in_process(
            instance=instance, run_config={"ops": {f"backtest_{workflow}": {"config": {
                "start": "2014-03-01", "end": "2014-03-10", "step": "1d"}}}})
    md = result.asset_materializations_for_node(f"backtest_{workflow}")[0].metadata
    picture(md["score_over_time_picture"].value)
    mean = md["mean_score"].value
    assert isinstance(mean, float) and mean == round(mean, 4)
    table = md["score_over_time"]
    assert isinstance(table, dg.TableMetadataValue)
    for record in table.records:
        score = record.data["mean_score"]
        assert isinstance(score, float)
        assert score != score or score == round(score, 4)  # NaN (no scored step) or rounded


def test_the_warm_launchers_process_tag_is_hidden_from_the_runs_table() -> None:
    """The runs table and the run page list a run's tags except Dagster's hidden ones; the
    launcher's process id is for the launcher, not for a reader."""
    from dagster._core.storage.tags import TagType, get_tag_type

    from resources.launcher import RUN_PROCESS_TAG, run_process_tag

    assert get_tag_type(RUN_PROCESS_TAG) is TagType.HIDDEN  # type: ignore[no-untyped-call]
    assert run_process_tag({"typestrict/run_process": '{"pid": 1}'}) == '{"pid": 1}'  # older runs
