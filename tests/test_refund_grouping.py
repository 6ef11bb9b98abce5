"""Undeclared groups (issue 27, item 4): the verdict says its resampling unit in words, the API and
the manifests say ``"group": null`` on purpose, and the product warns, before judging, about
groups it can see but nobody declared (``typestrict_pipeline/refund/grouping.py``)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
from pathlib import Path
from typing import Any

import pytest

from typestrict_pipeline.api.page import render_result_page
from typestrict_pipeline.cli import main as cli_main
from typestrict_pipeline.refund.audit import build_audit, write_audit
from typestrict_pipeline.refund.grouping import (
    UNGROUPED,
    WarningKind,
    detect_undeclared_groups,
    resampling_lines_from_audit,
    scan_dataset,
)
from typestrict_pipeline.refund.manifest import load_manifest
from typestrict_pipeline.refund.rule import judge
from typestrict_pipeline.refund.stream import group_sha256
from typestrict_pipeline.refund.types import DecisionData, DecisionKind, JudgedRow

_SUPPORT = Path(__file__).with_name("test_api_support.py")
_spec = importlib.util.spec_from_file_location("test_api_support", _SUPPORT)
assert _spec is not None and _spec.loader is not None
support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(support)


def _audit(grouped: bool, n: int = 120, per_group: int = 6) -> dict[str, Any]:
    rng = random.Random(5)
    rows = []
    for i in range(n):
        y = i % 2
        pm = (0.8, 0.2) if (y == 0) == (rng.random() < 0.8) else (0.2, 0.8)
        pj = (0.6, 0.4) if (y == 0) == (rng.random() < 0.6) else (0.4, 0.6)
        g = group_sha256(f"g\0c{i // per_group}") if grouped else None
        rows.append(JudgedRow(hashlib.sha256(f"t{i}".encode()).hexdigest(), y, pm, pj, group_sha256=g))
    judgement = judge([DecisionData("sentiment", DecisionKind.SINGLE, ("no", "yes"), tuple(rows))],
                      keep_if_loses=False)
    return build_audit(judgement, training_id="t1", model_id="t1", jev_id="jev")


UNGROUPED_LINE = ("Resampling unit: each example resampled on its own: if your examples come in groups "
                  "(several per customer, user, document or session), declare the group column so "
                  "whole groups are resampled.")


def test_the_unit_is_said_in_words_for_grouped_and_ungrouped_verdicts() -> None:
    assert f"Resampling unit: {UNGROUPED}." == UNGROUPED_LINE  # one wording, defined once
    assert resampling_lines_from_audit(_audit(False)) == UNGROUPED_LINE
    assert resampling_lines_from_audit(_audit(True)) == "Resampling unit: whole groups resampled (20 groups)."
    assert (resampling_lines_from_audit(_audit(True), "customer_id")
            == "Resampling unit: whole groups resampled (20 groups by column 'customer_id').")
    # an audit of format 1 has no unit: rows were resampled one by one
    assert resampling_lines_from_audit({"decisions": [{"name": "s", "report": {"n": 9, "bootstrap": {}}}]}) \
        == UNGROUPED_LINE
    assert resampling_lines_from_audit({"decisions": [], "overall": {"verdict": "failed"}}) == ""


def test_the_api_result_page_says_the_unit_and_the_warnings() -> None:
    page = render_result_page(_audit(False), model_id="t1", files_note="",
                              grouping_warnings=["Column 'customer_id' is named like a group"])
    assert '<p id="resampling">' + UNGROUPED_LINE.replace("'", "&#x27;") + "</p>" in page
    assert "Warning: Column &#x27;customer_id&#x27; is named like a group." in page
    grouped = render_result_page(_audit(True), model_id="t1", files_note="", group_column="user")
    assert "whole groups resampled (20 groups by column &#x27;user&#x27;)" in grouped


@pytest.mark.parametrize("grouped", [False, True])
def test_the_cli_verify_prints_the_unit_under_the_verdict(
    tmp_path: Path, grouped: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_audit(tmp_path / "audit.json", _audit(grouped))
    assert cli_main(["verify", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith("The credit")  # the verdict's sentence, then its unit
    expected = "Resampling unit: whole groups resampled (20 groups)." if grouped else UNGROUPED_LINE
    assert lines[-1] == expected
    assert cli_main(["verify", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["resampling_unit"] == expected


# --- the detector -------------------------------------------------------------------------------


def _training(folder: Path, header: list[str], rows: list[list[str]], group: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [",".join(header)] + [",".join(r) for r in rows]
    (folder / "data.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    manifest = {
        "manifest_version": 1, "training_id": "tr_g", "workspace_id": "demo",
        "dataset": {"path": "data.csv", "columns": {"id": "id", "text": "text", "group": group}},
        "decisions": [{"name": "sentiment", "question": "Good?", "answer_column": "label",
                       "answers": ["no", "yes"]}],
        "predictions": {"jev": {"kind": "file", "path": "jev.jsonl"}},
        "training": {"status": "failed", "reason": "not needed here"},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return folder / "manifest.json"


def _rows(n: int, extra: Any = None, text: Any = None) -> list[list[str]]:
    out = []
    for i in range(n):
        row = [f"r{i:04d}", text(i) if text else f"review {i} of a film number {i * 7}", ["no", "yes"][i % 2]]
        if extra is not None:
            row.append(extra(i))
        out.append(row)
    return out


def test_it_fires_on_a_customer_id_column(tmp_path: Path) -> None:
    manifest = load_manifest(_training(tmp_path, ["id", "text", "label", "customer_id"],
                                       _rows(200, lambda i: f"cust{i // 10}")))
    scan = scan_dataset(manifest)
    assert scan.group_column is None and scan.sampled_rows == 200
    assert [(w.kind, w.column) for w in scan.warnings] == [
        (WarningKind.NAME, "customer_id"), (WarningKind.REPEATS, "customer_id")]
    assert "declare it as the group column" in scan.warnings[0].message
    assert "\"group\": 'customer_id'" in scan.warnings[0].message
    assert scan.as_dict()["group"] is None and "group" in scan.as_dict()
    # named like a group but every value distinct: the name alone is still said
    unique = scan_dataset(load_manifest(_training(tmp_path / "u", ["id", "text", "label", "UserID"],
                                                  _rows(200, lambda i: f"u{i}"))))
    assert [(w.kind, w.column) for w in unique.warnings] == [(WarningKind.NAME, "UserID")]


def test_it_fires_on_a_column_with_heavy_repeats_but_not_on_a_category_or_when_declared(tmp_path: Path) -> None:
    rows = _rows(300, lambda i: str(1000 + i // 15))  # 20 values of 15 rows, a neutral name
    scan = scan_dataset(load_manifest(_training(tmp_path / "a", ["id", "text", "label", "batch"], rows)))
    [w] = scan.warnings
    assert w.kind is WarningKind.REPEATS and w.column == "batch"
    assert w.seen == ("300 sampled rows share 20 values of column 'batch' (15.0 rows per value on "
                      "average; the most common, '1000', on 15 rows)")
    # 3 values: a category (a flag, a language), not groups; declared: nothing to say
    category = _rows(300, lambda i: ["en", "fr", "de"][i % 3])
    assert scan_dataset(load_manifest(_training(tmp_path / "b", ["id", "text", "label", "lang"],
                                                category))).warnings == ()
    declared = scan_dataset(load_manifest(_training(tmp_path / "c", ["id", "text", "label", "batch"], rows,
                                                    group="batch")))
    assert declared.warnings == () and declared.group_column == "batch"


def test_it_fires_on_near_identical_texts(tmp_path: Path) -> None:
    def text(i: int) -> str:  # every 5th row copies another's text up to case, spacing and punctuation
        return f"Great film number {i - 1}!!" if i % 5 == 4 else f"great film number {i}"

    scan = scan_dataset(load_manifest(_training(tmp_path, ["id", "text", "label"], _rows(200, text=text))))
    [w] = scan.warnings
    assert w.kind is WarningKind.NEAR_DUPLICATES and w.column == "text"
    assert w.seen.startswith("80 of 200 sampled rows (40.0%) have a text near-identical to another row's")


def test_it_stays_quiet_on_the_demo_dataset_as_declared_and_names_the_movie_without_it() -> None:
    from typestrict_pipeline.demo_data.build import demo_frame

    frame = demo_frame()
    columns = {c: frame[c].tolist() for c in frame.columns}
    skip = {"id", "sentiment", "kind"}
    assert detect_undeclared_groups(columns, text="text", skip=skip, group="movie") == ()
    # Without its group column the demo's 1,435 movies are what the detector should find; its
    # 117 rows with a near-identical text (0.8%) stay under the 2% line.
    [w] = detect_undeclared_groups(columns, text="text", skip=skip)
    assert (w.kind, w.column) == (WarningKind.REPEATS, "movie")


def test_the_cli_split_warns_before_judging(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _training(tmp_path, ["id", "text", "label", "customer_id"], _rows(200, lambda i: f"c{i // 10}"))
    doc = json.loads(manifest.read_text())
    doc["training"] = {"status": "succeeded"}
    doc["predictions"]["model"] = {"kind": "file", "path": "model.jsonl"}
    manifest.write_text(json.dumps(doc))
    assert cli_main(["split", str(manifest)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "group column: none declared"
    assert lines[1] == UNGROUPED_LINE
    assert lines[2].startswith("warning: Column 'customer_id' is named like a group")
    assert cli_main(["split", str(manifest), "--json"]) == 0
    [summary] = json.loads(capsys.readouterr().out)
    assert summary["group"] is None and "group" in summary
    assert [w["kind"] for w in summary["grouping_warnings"]] == ["group_like_name", "repeated_values"]


@pytest.mark.parametrize(("case", "said"), [
    ("one group", "data.csv, column 'customer': expected at least 2 groups so some examples remain to train "
                  "on, got 1 ('acme'): the test takes whole groups, so all 200 rows would be held out. Add "
                  "examples of other groups, or declare no group column if the rows do not depend on each "
                  "other."),
    ("one text", "data.csv, column 'text': expected at least 2 distinct texts so some examples remain to "
                 "train on, got 1: identical texts"),
])
def test_the_cli_split_says_why_nothing_is_left_to_train_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, said: str) -> None:
    """A split that holds out every row showed "train 0" without a word, where a training's
    creation (the API, the console) and ``training check`` refuse it with the reason."""
    if case == "one group":
        manifest = _training(tmp_path, ["id", "text", "label", "customer"], _rows(200, lambda i: "acme"),
                             group="customer")
    else:
        manifest = _training(tmp_path, ["id", "text", "label"], _rows(200, text=lambda i: "same review"))
    assert cli_main(["split", str(manifest)]) == 0
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if "so some examples remain to train on" in line]
    assert line.startswith(f"warning: {tmp_path}/{said}"), line
    assert cli_main(["split", str(manifest), "--json"]) == 0
    assert [d["n_train"] for d in json.loads(capsys.readouterr().out)] == [0]
    # a split that leaves rows to train on says nothing of the kind
    fine = _training(tmp_path / "fine", ["id", "text", "label"], _rows(200))
    assert cli_main(["split", str(fine)]) == 0
    assert "remain to train on" not in capsys.readouterr().out


# --- the API ------------------------------------------------------------------------------------


def test_the_api_says_group_null_on_purpose_and_warns_before_judging(tmp_path: Path, sqlite_url: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    csv, jev = support.make_dataset(tmp_path)
    key = support.new_key(sqlite_url, "acme", credits=2)
    with support.ApiServer(sqlite_url, home, jev_source={"kind": "file", "path": str(jev)}) as server, \
            server.client(key) as c:
        assert c.put("/v1/files/reviews.csv", content=csv).status_code == 201
        body = json.loads(json.dumps(support.TRAINING_BODY))
        del body["dataset"]["columns"]["group"]  # the file has a column grp of 4 rows each
        created = c.post("/v1/trainings", json=body)
        assert created.status_code == 201, created.text
        out = created.json()
        assert "group" in out and out["group"] is None
        assert [(w["kind"], w["column"]) for w in out["grouping_warnings"]] == [("repeated_values", "grp")]
        tid = out["id"]
        assert c.get(f"/v1/trainings/{tid}").json()["grouping_warnings"] == out["grouping_warnings"]
        draft = json.loads((home / "trainings" / tid / "api-draft.json").read_text())
        assert "group" in draft["dataset"]["columns"] and draft["dataset"]["columns"]["group"] is None
        split = c.get(f"/v1/trainings/{tid}/split").json()
        assert "group" in split and split["group"] is None
        assert split["resampling_unit"] == UNGROUPED_LINE
        assert split["grouping_warnings"][0]["column"] == "grp"

        grouped = c.post("/v1/trainings", json=support.TRAINING_BODY).json()
        assert grouped["group"] == "grp" and grouped["grouping_warnings"] == []
        split = c.get(f"/v1/trainings/{grouped['id']}/split").json()
        assert split["resampling_unit"] == "Resampling unit: whole groups resampled (by column 'grp')."


def test_the_verdicts_dagster_metadata_records_the_unit_and_the_warnings() -> None:
    from assets.refund import _verdict_metadata
    from typestrict_pipeline.refund.grouping import GroupingScan, GroupingWarning

    rows = tuple(JudgedRow(hashlib.sha256(f"t{i}".encode()).hexdigest(), i % 2,
                           (0.9, 0.1) if i % 2 == 0 else (0.1, 0.9), (0.5, 0.5),
                           group_sha256=group_sha256(f"g\0u{i // 4}")) for i in range(40))
    judgement = judge([DecisionData("spam", DecisionKind.SINGLE, ("no", "yes"), rows)], keep_if_loses=False)
    seen = GroupingWarning(WarningKind.NAME, "session", "Column 'session' is named like a group", "Declare it", 40)
    meta = _verdict_metadata(judgement, "Jev", None, GroupingScan("user", 40, (seen,)), "user")
    assert meta["resampling unit"].value == "Resampling unit: whole groups resampled (10 groups by column 'user')."
    assert meta["grouping warnings"].value == "Column 'session' is named like a group. Declare it."
    assert next(iter(meta)) == "why"  # the verdict's sentence stays first
    quiet = _verdict_metadata(judgement, "Jev", None, GroupingScan("user", 40, ()), "user")
    assert quiet["grouping warnings"].value == "none seen in the first 40 rows"
