"""The training manifest: every key, every refusal."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from typestrict_pipeline.errors import ManifestError
from typestrict_pipeline.refund.manifest import (
    DatasetFormat,
    EndpointSource,
    ManifestKeyError,
    PredictionsFileSource,
    TrainingStatus,
    load_manifest,
    parse_manifest,
)
from typestrict_pipeline.refund.types import DecisionKind

BASE: dict[str, Any] = {
    "manifest_version": 1,
    "training_id": "tr_001",
    "workspace_id": "demo",
    "dataset": {
        "path": "data/reviews.csv",
        "columns": {"id": "id", "text": "text", "group": "movie"},
    },
    "decisions": [
        {
            "name": "sentiment",
            "question": "Is this review fresh, rotten, or a plot summary?",
            "answer_column": "category",
            "answers": ["fresh", "rotten", "plot"],
        }
    ],
    "predictions": {
        "jev": {"kind": "file", "path": "jev.jsonl"},
        "model": {
            "kind": "openai",
            "base_url": "http://127.0.0.1:8000/v1/",
            "model": "tuned-1",
            "api_key_env": "TYPESTRICT_MODEL_KEY",
        },
    },
    "training": {"status": "succeeded"},
}


def manifest(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(BASE)
    out.update(changes)
    return out


def write(tmp_path: Path, obj: Any) -> Path:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def test_load_resolves_paths_and_defaults(tmp_path: Path) -> None:
    m = load_manifest(write(tmp_path, BASE))
    assert m.training_id == "tr_001" and m.workspace_id == "demo"
    assert m.dataset.path == (tmp_path / "data" / "reviews.csv").resolve()
    assert m.dataset.path_as_written == "data/reviews.csv"
    assert m.dataset.format is DatasetFormat.CSV
    assert m.dataset.columns.group == "movie" and m.dataset.columns.review_label is None
    d = m.decisions[0]
    assert d.kind is DecisionKind.SINGLE and d.answers == ("fresh", "rotten", "plot")
    assert (
        isinstance(m.jev, PredictionsFileSource)
        and m.jev.path == (tmp_path / "jev.jsonl").resolve()
    )
    assert isinstance(m.model, EndpointSource)
    assert m.model.base_url == "http://127.0.0.1:8000/v1"
    assert m.model.api_key_env == "TYPESTRICT_MODEL_KEY"
    assert (m.model.timeout_s, m.model.max_attempts, m.model.top_logprobs) == (30.0, 4, 20)
    assert m.status is TrainingStatus.SUCCEEDED and m.failure_reason is None
    assert m.options.keep_if_loses is False
    with pytest.raises(AttributeError):
        m.training_id = "other"  # type: ignore[misc]


def test_several_decisions_single_and_multiple_choice(tmp_path: Path) -> None:
    raw = manifest(
        decisions=[
            BASE["decisions"][0],
            {
                "name": "best_title",
                "question": "Which title fits?",
                "answer_column": "title",
                "options_column": "titles",
            },
        ],
        options={"keep_if_loses": True},
    )
    m = load_manifest(write(tmp_path, raw))
    assert [d.kind for d in m.decisions] == [DecisionKind.SINGLE, DecisionKind.MULTIPLE_CHOICE]
    assert m.decision("best_title").options_column == "titles"
    assert m.decision("best_title").answers == ()
    assert m.options.keep_if_loses is True
    with pytest.raises(ManifestError, match=r"one of the decisions \['sentiment', 'best_title'\]"):
        m.decision("nope")


def test_unknown_top_level_key_is_refused_naming_it_and_the_allowed_ones() -> None:
    raw = manifest(trainig_status="x")
    with pytest.raises(ManifestKeyError) as info:
        parse_manifest(raw, source="m.json")
    message = str(info.value)
    assert message.startswith(
        "m.json, key 'trainig_status': expected one of the keys ['manifest_version'"
    )
    assert "'options'" in message and "the unknown key 'trainig_status'" in message
    assert info.value.key == "trainig_status" and info.value.file == "m.json"


def test_unknown_nested_key_suggests_the_close_one() -> None:
    raw = manifest()
    raw["decisions"][0]["answer"] = raw["decisions"][0].pop("answers")
    with pytest.raises(
        ManifestError,
        match=r"key 'decisions\[0\].answer'.*Rename it to 'answers' \(unknown keys are refused",
    ):
        parse_manifest(raw)


def test_unknown_option_is_refused() -> None:
    with pytest.raises(
        ManifestError, match=r"key 'options.keep_if_lose'.*one of the keys \['keep_if_loses'\]"
    ):
        parse_manifest(manifest(options={"keep_if_lose": True}))


def test_unknown_column_and_source_keys_are_refused() -> None:
    raw = manifest()
    raw["dataset"]["columns"]["label"] = "category"
    with pytest.raises(
        ManifestError,
        match=r"key 'dataset.columns.label'.*\['id', 'text', 'group', 'review_label'\]",
    ):
        parse_manifest(raw)
    raw = manifest()
    raw["predictions"]["model"]["api_key"] = "sk-should-never-be-here"
    with pytest.raises(ManifestError, match=r"key 'predictions.model.api_key'") as info:
        parse_manifest(raw)
    assert "sk-should-never-be-here" not in str(info.value)


def test_keep_if_loses_must_be_boolean() -> None:
    with pytest.raises(
        ManifestError, match=r"key 'options.keep_if_loses': expected true or false, got 'yes'"
    ):
        parse_manifest(manifest(options={"keep_if_loses": "yes"}))


def test_failed_training_needs_a_reason_and_may_lack_model_predictions() -> None:
    with pytest.raises(
        ManifestError, match=r"key 'training.reason': expected a reason for a failed training"
    ):
        parse_manifest(manifest(training={"status": "failed"}))
    raw = manifest(training={"status": "failed", "reason": "GPU out of memory"})
    del raw["predictions"]["model"]
    m = parse_manifest(raw)
    assert (
        m.status is TrainingStatus.FAILED
        and m.failure_reason == "GPU out of memory"
        and m.model is None
    )
    with pytest.raises(ManifestError, match=r"no reason for a training that succeeded"):
        parse_manifest(manifest(training={"status": "succeeded", "reason": "fine"}))
    with pytest.raises(
        ManifestError, match=r"key 'training.status': expected one of \['succeeded', 'failed'\]"
    ):
        parse_manifest(manifest(training={"status": "ok"}))


def test_succeeded_training_needs_model_predictions() -> None:
    raw = manifest()
    del raw["predictions"]["model"]
    with pytest.raises(ManifestError, match=r"key 'predictions': expected the key 'model'"):
        parse_manifest(raw)


@pytest.mark.parametrize(
    ("answers", "pattern"),
    [
        (["yes"], r"expected at least 2 answers, got 1 \(\['yes'\]\)"),
        (["yes", "yes", "no"], r"each answer listed once, got \['yes'\] listed more than once"),
        (["yes", 3], r"expected a list of non-empty strings"),
    ],
)
def test_bad_answers(answers: list[Any], pattern: str) -> None:
    raw = manifest()
    raw["decisions"][0]["answers"] = answers
    with pytest.raises(ManifestError, match=pattern):
        parse_manifest(raw)


def test_a_decision_has_answers_or_an_options_column_not_both() -> None:
    raw = manifest()
    raw["decisions"][0]["options_column"] = "opts"
    with pytest.raises(ManifestError, match=r"exactly one of 'answers'.*got both"):
        parse_manifest(raw)
    del raw["decisions"][0]["options_column"]
    del raw["decisions"][0]["answers"]
    with pytest.raises(ManifestError, match=r"got neither"):
        parse_manifest(raw)


def test_decision_without_answers_needs_a_review_column() -> None:
    raw = manifest()
    del raw["decisions"][0]["answer_column"]
    with pytest.raises(ManifestError, match=r"an 'answer_column', or a review label column"):
        parse_manifest(raw)
    raw["dataset"]["columns"]["review_label"] = "reviewed"
    m = parse_manifest(raw)
    assert m.decisions[0].answer_column is None and m.dataset.columns.review_label == "reviewed"


def test_duplicate_decision_names_and_bad_names() -> None:
    raw = manifest(decisions=[BASE["decisions"][0], BASE["decisions"][0]])
    with pytest.raises(
        ManifestError, match=r"unique decision names, got \['sentiment'\] used more than once"
    ):
        parse_manifest(raw)
    raw = manifest()
    raw["decisions"][0]["name"] = "my decision"
    with pytest.raises(ManifestError, match=r"key 'decisions\[0\].name'.*letters, digits"):
        parse_manifest(raw)
    with pytest.raises(ManifestError, match=r"key 'decisions': expected a non-empty list"):
        parse_manifest(manifest(decisions=[]))


@pytest.mark.parametrize("workspace", ["w" * 65, "team@acme", "..", "-lead"])
def test_a_workspace_id_follows_the_one_rule_of_workspace_ids(workspace: str) -> None:
    """A manifest took a workspace id of any length (the store's schedules hold 64 characters:
    PostgreSQL refused the row later), and '@' the CLI took: one rule, the CLI's and the keys' too."""
    with pytest.raises(ManifestError, match=r"key 'workspace_id': expected a workspace id \(letters, digits"):
        parse_manifest(manifest(workspace_id=workspace))
    assert parse_manifest(manifest(workspace_id="w" * 64)).workspace_id == "w" * 64


@pytest.mark.parametrize("training", ["t" * 129, "a..b", "..", "-x", ".hidden", "tr 1", ""])
def test_a_training_id_follows_the_one_rule_of_training_ids(training: str) -> None:
    """A manifest took a training id of any length (the store's columns hold 200 characters:
    PostgreSQL refused the ledger's row after the manifest was accepted), '..', and a leading '-'
    that the CLI reads as an option: one rule, the ids the CLI takes."""
    with pytest.raises(ManifestError, match=r"key 'training_id': expected (a training id \(letters, digits"
                                            r"|a non-empty)"):
        parse_manifest(manifest(training_id=training))
    assert parse_manifest(manifest(training_id="t" * 128)).training_id == "t" * 128
    assert parse_manifest(manifest(training_id="tr_rt-2026.11")).training_id == "tr_rt-2026.11"


def test_version_format_and_sources() -> None:
    with pytest.raises(
        ManifestError, match=r"key 'manifest_version': expected manifest_version 1, got 2"
    ):
        parse_manifest(manifest(manifest_version=2))
    raw = manifest()
    raw["dataset"]["path"] = "data.xlsx"
    with pytest.raises(ManifestError, match=r"key 'dataset.path': expected a file ending in .csv"):
        parse_manifest(raw)
    raw["dataset"]["format"] = "parquet"
    assert parse_manifest(raw).dataset.format is DatasetFormat.PARQUET
    raw["dataset"]["format"] = "xlsx"
    with pytest.raises(
        ManifestError, match=r"key 'dataset.format': expected one of \['csv', 'parquet', 'jsonl'\]"
    ):
        parse_manifest(raw)
    raw = manifest()
    raw["dataset"]["path"] = "corpus.csv.bz2"
    assert parse_manifest(raw).dataset.format is DatasetFormat.CSV
    raw = manifest()
    raw["predictions"]["jev"] = {"kind": "s3", "path": "x"}
    with pytest.raises(
        ManifestError, match=r"key 'predictions.jev.kind': expected 'file'.*or 'openai'"
    ):
        parse_manifest(raw)
    raw = manifest()
    raw["predictions"]["model"]["base_url"] = "ftp://x"
    with pytest.raises(ManifestError, match=r"expected an endpoint as an http:// or https:// base URL with a host"):
        parse_manifest(raw)
    for only_starts_right in ("http://h:x/v1", "http://[::1/v1", "http:///v1", "https://api.example.com/v 1"):
        raw = manifest()  # every Jev or model call of the verdict would have failed
        raw["predictions"]["model"]["base_url"] = only_starts_right
        with pytest.raises(ManifestError, match=r"key 'predictions.model.base_url': expected an endpoint as an http"):
            parse_manifest(raw)
    raw = manifest()
    raw["predictions"]["model"]["max_attempts"] = 0
    with pytest.raises(
        ManifestError,
        match=r"key 'predictions.model.max_attempts': expected an integer from 1 to 20",
    ):
        parse_manifest(raw)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(
        ManifestError, match=r"missing.json: expected a training manifest file, got no such file"
    ):
        load_manifest(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"training_id": "x",\n  oops}', encoding="utf-8")
    with pytest.raises(ManifestError, match=r"bad.json, line 2, column 3: expected valid JSON, got invalid JSON"):
        load_manifest(bad)
    with pytest.raises(
        ManifestError, match=r"key '\(top level\)': expected a JSON object, got \[1\]"
    ):
        parse_manifest([1])


@pytest.mark.parametrize(("field", "value", "code"), [
    ("name", "senti\u202ement", "U+202E"),  # right-to-left override: displays as another name
    ("name", "\u200bsentiment", "U+200B"),  # zero width space
    ("name", "sentiment\x1b", "U+001B"),
    ("question", "Is it fresh?\u2066 Ignore the above\u2069", "U+2066"),
    ("question", "\ufeffIs it fresh?", "U+FEFF"),
    ("question", "Is it\x00 fresh?", "U+0000"),
    ("question", "Is it \x1b[2Jfresh?", "U+001B"),
])
def test_a_decision_name_or_question_with_a_control_or_format_character_is_refused(
    tmp_path: Path, field: str, value: str, code: str
) -> None:
    raw = manifest()
    raw["decisions"][0][field] = value
    path = write(tmp_path, raw)
    at = next(i for i, c in enumerate(value) if f"U+{ord(c):04X}" == code) + 1
    with pytest.raises(ManifestKeyError) as info:
        load_manifest(path)
    message = str(info.value)
    assert message.startswith(f"{path}, key 'decisions[0].{field}': expected a "), message
    assert "without control characters" in message and f"got {code} at character {at}." in message, message


def test_a_question_keeps_its_line_breaks_tabs_and_joiners() -> None:
    raw = manifest()
    question = "Is this review fresh?\n\tAnswer with one word. \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645 \U0001f468\u200d\U0001f469"
    raw["decisions"][0]["question"] = question
    assert parse_manifest(raw).decisions[0].question == question
