"""``typestrict training submit|cancel`` refuse a training's state in the CLI's words (its
commands), while the API says the same refusal in its own (its routes): one rule in the
lifecycle, spelled per door."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_api_support import TRAINING_BODY, make_dataset, model_predictions
from typestrict_pipeline.api.trainings import TrainingRequest, TrainingStore
from typestrict_pipeline.cli import main
from typestrict_pipeline.credits import CreditLedger
from typestrict_pipeline.credits.ledger import run_transaction
from typestrict_pipeline.errors import ConflictError
from typestrict_pipeline.lifecycle.trainings import mark_settled_in
from typestrict_pipeline.refund.types import Verdict
from typestrict_pipeline.store import open_store

API_WORDS = ("GET /v1", "/v1/", "with the API", "workspace's key")


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("TYPESTRICT_HOME", str(home))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    csv, jev = make_dataset(tmp_path, seed=3)
    engine = open_store(url)
    CreditLedger(engine).grant("acme", 3, reference="words-tests")
    store = TrainingStore(home, engine, {"kind": "file", "path": str(jev)})
    store.area("acme").save("reviews.csv", csv)
    tid = store.create("acme", TrainingRequest(dataset=TRAINING_BODY["dataset"], decisions=TRAINING_BODY["decisions"],
                                               options=TRAINING_BODY["options"]))
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("".join(json.dumps(p) + "\n" for p in model_predictions(csv, skill=0.9)))
    yield {"home": home, "url": url, "engine": engine, "store": store, "tid": tid, "predictions": predictions}
    engine.dispose()


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    for word in API_WORDS:
        assert word not in err, err
    return err


def test_submitting_to_a_training_being_judged_says_what_to_do_in_cli_words(
    world: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tid, url = world["tid"], world["url"]
    assert main(["training", "submit", tid, str(world["predictions"]), "--store", url]) == 0
    capsys.readouterr()
    err = _refused(["training", "submit", tid, str(world["predictions"]), "--store", url], capsys)
    assert (f"typestrict: expected training {tid!r} to await its predictions (or corrected ones after a refusal), "
            f"got its predictions already accepted and being judged. Its verdict follows; see it with "
            f"`typestrict training show {tid}`") in err
    err = _refused(["training", "cancel", tid, "--store", url], capsys)
    assert f"expected training {tid!r} awaiting its predictions (or refused ones) to cancel, got it judging" in err
    # The API's door says the same refusal in its words.
    with pytest.raises(ConflictError, match=r"Its verdict follows; read GET /v1/trainings/\{id\}"):
        world["store"].submit("acme", tid, world["predictions"].read_bytes(), None)


def test_submitting_to_a_settled_training_points_at_training_show(
    world: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tid, url = world["tid"], world["url"]
    assert main(["training", "submit", tid, str(world["predictions"]), "--store", url]) == 0
    capsys.readouterr()
    run_transaction(world["engine"], lambda s: mark_settled_in(s, tid, Verdict.REFUND,
                                                               now=dt.datetime.now(dt.UTC)))
    err = _refused(["training", "submit", tid, str(world["predictions"]), "--store", url], capsys)
    assert (f"got it already settled. Read its verdict with `typestrict training show {tid}`") in err
    with pytest.raises(ConflictError, match=r"Read its verdict with GET /v1/models/\{id\}"):
        world["store"].submit("acme", tid, world["predictions"].read_bytes(), None)


def test_cancelling_a_training_the_store_has_no_state_for_names_the_cli_command(
    world: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = world["home"] / "trainings" / "by-manifest"  # registered by its manifest: no lifecycle row
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"workspace_id": "acme"}))
    err = _refused(["training", "cancel", "by-manifest", "--store", world["url"]], capsys)
    assert ("expected a training with id 'by-manifest' in this workspace, got none. Check the id: "
            "`typestrict training list WORKSPACE` lists a workspace's trainings") in err


def test_a_wrong_trained_on_sha256_is_named_by_its_option_not_the_apis_key(
    world: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    tid, url = world["tid"], world["url"]
    err = _refused(["training", "submit", tid, str(world["predictions"]), "--trained-on-sha256", "0" * 64,
                    "--store", url], capsys)
    assert f"typestrict: --trained-on-sha256: expected the SHA-256 of the 160 training rows of training {tid!r}" in err
    assert "State the SHA-256 of exactly the training rows of the split" in err
    assert "request" not in err and "key 'training." not in err and "trained_on_ids" not in err
    assert world["store"].view("acme", tid).state.value == "awaiting_predictions"  # nothing taken
    err = _refused(["training", "submit", tid, str(world["predictions"]), "--trained-on-sha256", "xyz",
                    "--store", url], capsys)
    assert "argument --trained-on-sha256: expected --trained-on-sha256 as 64 hexadecimal characters (a SHA-256), " \
           "got 'xyz'" in err
