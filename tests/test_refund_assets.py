"""The refund chain materialized in process: verdicts, asset checks, failed and multi-decision
trainings, a bad manifest, and what the UI shows."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from assets.refund import (
    REFUND_ASSETS,
    REFUND_CHECKS,
    build_defs,
    metrics_table_markdown,
    verdict_job,
)
from resources.refund import (
    ManifestSourceClientResource,
    PredictionsFileClientResource,
    RefundTrainingsResource,
    default_resources,
)
from resources.store import StoreResource
from typestrict_pipeline.refund.types import Verdict

_SUPPORT = Path(__file__).with_name("test_refund_assets_support.py")
_spec = importlib.util.spec_from_file_location("test_refund_assets_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)

VERIFIER = Path(__file__).resolve().parent.parent / "typestrict_pipeline" / "verify_audit.py"
KEYS = ["dataset", "holdout", "jev_predictions", "model_predictions", "metrics", "verdict", "audit"]


def run_training(
    home: Path,
    training_id: str,
    *,
    resources: dict[str, Any] | None = None,
    instance: dg.DagsterInstance | None = None,
    raise_on_error: bool = True,
) -> dg.ExecuteInProcessResult:
    """Materialize one training's partition with verdict_job, in process (on ``instance``, else an
    ephemeral one, disposed when the run ends: an instance left to the garbage collector closes
    its SQLite connection in whichever thread collects it, and logs an error there)."""
    if instance is None:
        with dg.DagsterInstance.ephemeral() as ephemeral:
            return run_training(home, training_id, resources=resources, instance=ephemeral,
                                raise_on_error=raise_on_error)
    instance.add_dynamic_partitions("trainings", [training_id])
    base: dict[str, Any] = {
        "refund_trainings": RefundTrainingsResource(
            folder=str(home / "trainings"), audits_folder=str(home / "audits")
        ),
        "refund_jev_client": ManifestSourceClientResource(max_workers=1),
        "refund_model_client": ManifestSourceClientResource(max_workers=1),
        "store": StoreResource(url=f"sqlite:///{home / 'store.db'}"),
    }
    base.update(resources or {})
    defs = dg.Definitions(
        assets=list(REFUND_ASSETS), asset_checks=list(REFUND_CHECKS), jobs=[verdict_job], resources=base
    )
    job = defs.resolve_job_def("verdict_job")
    return job.execute_in_process(
        partition_key=training_id, instance=instance, raise_on_error=raise_on_error
    )


def checks_of(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def verdict_metadata(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    [mat] = [
        m for m in result.get_asset_materialization_events()
        if m.asset_key == dg.AssetKey("verdict")
    ]
    return {k: v.value for k, v in mat.materialization.metadata.items()}


def test_the_definitions_have_the_refund_graph() -> None:
    defs = dg.Definitions.merge(
        build_defs(), dg.Definitions(resources={**default_resources(), "store": StoreResource()}))
    graph = defs.resolve_asset_graph()
    keys = sorted(k.to_user_string() for k in graph.get_all_asset_keys())
    assert keys == sorted(KEYS)
    deps = {k: sorted(p.to_user_string() for p in graph.get(dg.AssetKey(k)).parent_keys) for k in KEYS}
    assert deps["holdout"] == ["dataset"]
    assert deps["jev_predictions"] == ["holdout"]
    assert deps["model_predictions"] == ["holdout"]
    assert deps["metrics"] == ["holdout", "jev_predictions", "model_predictions"]
    assert deps["verdict"] == ["metrics"]
    assert deps["audit"] == ["metrics", "verdict"]
    for k in KEYS:
        node = graph.get(dg.AssetKey(k))
        assert node.group_name == "refund"
        assert node.partitions_def == dg.DynamicPartitionsDefinition(name="trainings")
    checks = sorted(c.name for c in graph.asset_check_keys)
    assert checks == ["gain_is_real", "nothing_collapses"]
    assert defs.resolve_job_def("verdict_job") is not None


def test_a_strong_model_beats_jev_and_its_audit_verifies(tmp_path: Path) -> None:
    support.make_training(tmp_path / "trainings", "tr_strong", model_skill=0.95, jev_skill=0.55)
    result = run_training(tmp_path, "tr_strong")
    assert result.success
    judgement = result.output_for_node("verdict")
    assert judgement.verdict is Verdict.BEATS
    checks = checks_of(result)
    assert checks["gain_is_real"].passed and checks["nothing_collapses"].passed
    meta = verdict_metadata(result)
    assert meta["verdict"] == "beats"
    assert meta["settling_decision"] == "sentiment"
    report_md = meta["report"]
    for name in ("macro_f1", "brier_skill", "selective_acc_80", "worst_class_f1", "G =", "5th percentile"):
        assert name in report_md
    assert meta["count G<=0"] == judgement.decisions[0].bootstrap.n_gain_le_0
    assert meta["G q05"] == round(judgement.decisions[0].bootstrap.q05, 4) > 0  # rounded in the UI
    audit_path = Path(result.output_for_node("audit"))
    assert audit_path == tmp_path / "audits" / "tr_strong.json"
    audit = json.loads(audit_path.read_text())
    assert audit["overall"]["verdict"] == "beats"
    assert audit["model_id"].startswith("file-sha256:")
    assert "example 1 of" not in audit_path.read_text()  # no example text in the audit
    proc = subprocess.run(
        [sys.executable, str(VERIFIER), str(audit_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_weak_model_is_refunded_and_the_checks_say_why(tmp_path: Path) -> None:
    support.make_training(tmp_path / "trainings", "tr_weak", model_skill=0.4, jev_skill=0.8, seed=3)
    result = run_training(tmp_path, "tr_weak")
    assert result.success  # a refund is a verdict, not a failure of the run
    judgement = result.output_for_node("verdict")
    assert judgement.verdict is Verdict.REFUND
    assert judgement.refunds_credit
    checks = checks_of(result)
    assert not checks["gain_is_real"].passed
    assert not checks["nothing_collapses"].passed
    assert checks["nothing_collapses"].severity is dg.AssetCheckSeverity.WARN
    broken = checks["nothing_collapses"].metadata["sentiment: broken margins"].value
    assert isinstance(broken, str) and "macro_f1" in broken


def test_the_holdout_lists_every_example_with_its_role(tmp_path: Path) -> None:
    support.make_training(tmp_path / "trainings", "tr_roles", n=200)
    result = run_training(tmp_path, "tr_roles")
    held = result.output_for_node("holdout")
    roles = held.roles
    assert len(roles) == 200 and set(roles["role"]) <= {"test", "train", "excluded"}
    assert sorted(roles["id"]) == [f"ex{i:04d}" for i in range(200)]
    counts = roles["role"].value_counts().to_dict()
    assert counts["test"] == 40  # 20% of 200
    # whole groups: no group has rows on both sides
    test_groups = set(roles.loc[roles.role == "test", "group"])
    assert not test_groups & set(roles.loc[roles.role == "train", "group"])
    [mat] = [m for m in result.get_asset_materialization_events() if m.asset_key == dg.AssetKey("holdout")]
    assert mat.materialization.metadata["sentiment: test"].value == 40


def test_a_failed_training_is_a_failed_verdict_with_its_reason(tmp_path: Path) -> None:
    support.make_training(tmp_path / "trainings", "tr_failed", status="failed")
    result = run_training(tmp_path, "tr_failed")
    assert result.success
    judgement = result.output_for_node("verdict")
    assert judgement.verdict is Verdict.FAILED
    assert judgement.failure_reason == "the trainer ran out of memory"
    assert result.output_for_node("jev_predictions").predictions.predictions == {}
    meta = verdict_metadata(result)
    assert meta["failure_reason"] == "the trainer ran out of memory"
    audit = json.loads((tmp_path / "audits" / "tr_failed.json").read_text())
    assert audit["overall"]["verdict"] == "failed"
    assert audit["overall"]["refunds_credit"] is True


def test_a_two_decision_training_needs_both_and_names_the_settling_decision(tmp_path: Path) -> None:
    support.make_training(
        tmp_path / "trainings", "tr_two", decisions=("sentiment", "topic"),
        model_skill=(0.95, 0.3), jev_skill=0.6, n=300, seed=5,
    )
    result = run_training(tmp_path, "tr_two")
    judgement = result.output_for_node("verdict")
    assert [r.name for r in judgement.decisions] == ["sentiment", "topic"]
    assert [r.beats for r in judgement.decisions] == [True, False]
    assert judgement.needed == 2 and judgement.won == 1
    assert judgement.verdict is Verdict.REFUND
    assert judgement.settling_decision == "topic"  # the first decision lost
    meta = verdict_metadata(result)
    assert meta["settling_decision"] == "topic"
    assert meta["decisions_won"] == "1 of 2 (needed 2)"
    assert "sentiment: G q05" in meta and "topic: G q05" in meta
    held = result.output_for_node("holdout")
    assert set(held.roles["decision"]) == {"sentiment", "topic"}  # each decision its own split
    audit = json.loads((tmp_path / "audits" / "tr_two.json").read_text())
    assert [d["name"] for d in audit["decisions"]] == ["sentiment", "topic"]


def test_a_bad_manifest_fails_the_run_clearly_and_writes_nothing(tmp_path: Path) -> None:
    path = support.make_training(tmp_path / "trainings", "tr_bad")
    manifest = json.loads(path.read_text())
    manifest["decisions"][0]["answer_colum"] = manifest["decisions"][0].pop("answer_column")
    path.write_text(json.dumps(manifest))
    result = run_training(tmp_path, "tr_bad", raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert failure.step_key == "dataset"
    error = failure.step_failure_data.error
    assert error is not None
    message = error.cause.message if error.cause else error.message
    user = failure.step_failure_data.user_failure_data  # the product's message is the failure reason
    assert user is not None and user.metadata["error"].value == "ManifestKeyError"
    assert user.description == message  # the message alone, no "Failure:" prefix, no stack
    assert error.stack == []
    assert "manifest.json" in message
    assert "'answer_colum'" in message and "'answer_column'" in message  # names the key and the fix
    assert not (tmp_path / "audits").exists()


def test_a_manifest_for_another_training_is_refused(tmp_path: Path) -> None:
    path = support.make_training(tmp_path / "trainings", "tr_a")
    (tmp_path / "trainings" / "tr_b").mkdir()
    (tmp_path / "trainings" / "tr_b" / "manifest.json").write_text(path.read_text())
    with pytest.raises(Exception, match="training_id 'tr_b'"):
        run_training(tmp_path, "tr_b")
    assert not (tmp_path / "audits").exists()


def test_the_predictions_file_resource_overrides_the_manifest(tmp_path: Path) -> None:
    support.make_training(tmp_path / "trainings", "tr_over", model_skill=0.95, jev_skill=0.55, seed=9)
    # Use Jev's own file as "the model": equal systems cannot beat each other.
    jev_file = tmp_path / "trainings" / "tr_over" / "jev.jsonl"
    result = run_training(
        tmp_path, "tr_over",
        resources={"refund_model_client": PredictionsFileClientResource(path=str(jev_file))},
    )
    judgement = result.output_for_node("verdict")
    assert judgement.verdict is Verdict.REFUND  # a tie is a refund
    report = judgement.decisions[0]
    assert report.gain == 0.0 and report.bootstrap.q05 == 0.0


def test_the_metrics_table_shows_both_systems_deltas_and_margins(tmp_path: Path) -> None:
    support.make_training(tmp_path / "trainings", "tr_md", model_skill=0.9, jev_skill=0.6, seed=2)
    result = run_training(tmp_path, "tr_md")
    report = result.output_for_node("metrics").reports[0]
    table = metrics_table_markdown(report, jev_label="Jev (demo stand-in)")
    lines = table.splitlines()
    assert lines[0] == (
        "| metric | model | Jev (demo stand-in) | Δ (model − Jev) | margin | held |"
    )
    row = next(line for line in lines if line.startswith("| macro_f1 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == f"{report.model.macro_f1:.4f}"
    assert cells[2] == f"{report.jev.macro_f1:.4f}"
    assert cells[3] == f"{report.deltas['macro_f1']:+.4f}"
    assert cells[4] == "-0.02"
    assert next(line for line in lines if line.startswith("| worst_class_f1 |")).count("-0.05") == 1


@pytest.mark.slow
def test_two_trainings_on_one_instance_each_check_their_own_verdict(tmp_path: Path) -> None:
    support.make_training(tmp_path / "trainings", "tr_one", model_skill=0.95, jev_skill=0.55, seed=11)
    support.make_training(tmp_path / "trainings", "tr_two", model_skill=0.4, jev_skill=0.8, seed=12)
    with dg.instance_for_test() as instance:
        first = run_training(tmp_path, "tr_one", instance=instance)
        second = run_training(tmp_path, "tr_two", instance=instance)
        assert first.success and second.success
        assert checks_of(first)["gain_is_real"].passed
        assert not checks_of(second)["gain_is_real"].passed  # its own verdict, not tr_one's
        assert second.output_for_node("verdict").verdict is Verdict.REFUND
        assert sorted(instance.get_dynamic_partitions("trainings")) == ["tr_one", "tr_two"]


def test_jev_over_http_through_the_stand_in_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real HTTP client against a local OpenAI-compatible stand-in (no skill: hashed answers)."""
    from typestrict_pipeline.clients.prompt import parse_classification_prompt
    from typestrict_pipeline.clients.standin import StandinServer

    monkeypatch.setenv("TEST_JEV_KEY", "sk-test-not-a-secret-1234")
    with StandinServer(model_name="standin-jev") as server:
        support.make_training(
            tmp_path / "trainings", "tr_http", n=120, model_skill=0.95, seed=4,
            jev={"kind": "openai", "base_url": server.base_url, "model": "standin-jev",
                 "api_key_env": "TEST_JEV_KEY", "max_attempts": 2},
        )
        result = run_training(
            tmp_path, "tr_http",
            resources={"refund_jev_client": ManifestSourceClientResource(label="Jev (stand-in)", max_workers=4)},
        )
        requests = server.requests
    assert result.success
    answers = result.output_for_node("jev_predictions")
    assert answers.system_id == "standin-jev" and answers.label == "Jev (stand-in)"
    assert len(requests) == answers.usage.calls == 24  # 20% of 120 test examples, one call each
    assert {r.authorization for r in requests} == {"Bearer sk-test-not-a-secret-1234"}
    # the model's question and examples are the ones Jev got
    prompts = [parse_classification_prompt(r.messages) for r in requests]
    asked_texts = sorted(p.text for p in prompts if p is not None)
    held = result.output_for_node("holdout").holdout("sentiment")
    data = result.output_for_node("dataset").dataset
    by_id = {ex.id: ex.text for ex in data.examples}
    assert asked_texts == sorted(by_id[i] for i in held.test_ids)
    assert {(p.question, p.options) for p in prompts if p is not None} == {("Which sentiment?", ("yes", "no"))}
    # the key is never in what Dagster stored
    [mat] = [m for m in result.get_asset_materialization_events() if m.asset_key == dg.AssetKey("jev_predictions")]
    assert "sk-test" not in repr(mat.materialization.metadata)
    assert result.output_for_node("verdict").verdict is Verdict.BEATS


def test_a_missing_api_key_fails_the_first_step_with_the_variable_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typestrict_pipeline.clients.standin import StandinServer

    monkeypatch.delenv("TEST_JEV_KEY_UNSET", raising=False)
    with StandinServer() as server:
        support.make_training(
            tmp_path / "trainings", "tr_nokey", n=60,
            jev={"kind": "openai", "base_url": server.base_url, "model": "standin",
                 "api_key_env": "TEST_JEV_KEY_UNSET", "max_attempts": 1},
        )
        result = run_training(tmp_path, "tr_nokey", raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert failure.step_key == "dataset"  # checked before the first asset is stored
    error = failure.step_failure_data.error
    assert error is not None
    assert "TEST_JEV_KEY_UNSET" in (error.cause or error).message
    assert not (tmp_path / "audits").exists()


def test_a_multiple_choice_decision_goes_through_the_chain(tmp_path: Path) -> None:
    support.make_mc_training(tmp_path / "trainings", "tr_mc", seed=8)
    result = run_training(tmp_path, "tr_mc")
    judgement = result.output_for_node("verdict")
    [report] = judgement.decisions
    assert report.kind.value == "multiple_choice"
    assert report.answers == ("1", "2", "3", "4")  # option positions
    assert report.n_options is not None and set(report.n_options) <= {2, 3, 4}
    assert judgement.verdict is Verdict.BEATS
    proc = subprocess.run(
        [sys.executable, str(VERIFIER), str(result.output_for_node("audit"))],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_keep_if_loses_turns_a_loss_into_kept(tmp_path: Path) -> None:
    support.make_training(
        tmp_path / "trainings", "tr_keep", model_skill=0.4, jev_skill=0.8, seed=3, keep_if_loses=True
    )
    result = run_training(tmp_path, "tr_keep")
    judgement = result.output_for_node("verdict")
    assert judgement.verdict is Verdict.KEPT and not judgement.refunds_credit
    assert verdict_metadata(result)["refunds_credit"] is False


def test_a_predictions_file_missing_a_test_example_fails_clearly(tmp_path: Path) -> None:
    path = support.make_training(tmp_path / "trainings", "tr_gap", n=100, seed=6)
    model_file = path.parent / "model.jsonl"
    lines = model_file.read_text().splitlines(keepends=True)
    model_file.write_text("".join(lines[:50]))  # the model forgot half the examples
    result = run_training(tmp_path, "tr_gap", raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert failure.step_key == "dataset"  # checked before the first asset is stored
    error = failure.step_failure_data.error
    assert error is not None
    message = (error.cause or error).message
    user = failure.step_failure_data.user_failure_data  # the product's message is the failure reason
    assert user is not None and user.metadata["error"].value == "PredictionsError"
    assert "model.jsonl" in message
    assert not (tmp_path / "audits").exists()


def test_a_dataset_of_a_header_without_rows_fails_the_first_step_as_the_check_says(
    tmp_path: Path,
) -> None:
    from typestrict_pipeline.refund.manifest import load_manifest
    from typestrict_pipeline.refund.preflight import screen_training

    path = support.make_training(tmp_path / "trainings", "tr_rows0", n=20, seed=3)
    data = path.parent / "data.csv"
    data.write_text(data.read_text().splitlines()[0] + "\n")  # the header, no rows
    for name in ("model.jsonl", "jev.jsonl"):
        (path.parent / name).write_text("")
    said = screen_training(load_manifest(path))  # what the sensor and `training check` say
    assert said is not None and "expected at least one data row, got none" in said
    result = run_training(tmp_path, "tr_rows0", raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert failure.step_key == "dataset"
    user = failure.step_failure_data.user_failure_data
    assert user is not None and user.metadata["error"].value == "NotEnoughDataError"
    assert user.description == said  # the same message, not a TypeError from the progress line
    assert not (tmp_path / "audits").exists()


def test_the_trainings_resource_follows_the_folder_convention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typestrict_pipeline.errors import ManifestError

    monkeypatch.setenv("TYPESTRICT_HOME", str(tmp_path))
    res = RefundTrainingsResource()
    assert res.manifest_path("tr_1") == tmp_path / "trainings" / "tr_1" / "manifest.json"
    assert res.audit_path("tr_1") == tmp_path / "audits" / "tr_1.json"
    support.make_training(tmp_path / "trainings", "tr_1", n=20)
    (tmp_path / "trainings" / "not-yet").mkdir()  # no manifest: not a training
    assert res.training_ids() == ["tr_1"]
    for bad in ("../etc", "a/b", "..", ""):
        with pytest.raises(ManifestError, match="a training id of letters"):
            res.manifest_path(bad)
    with pytest.raises(ManifestError, match="no such file"):
        res.load("tr_2")
