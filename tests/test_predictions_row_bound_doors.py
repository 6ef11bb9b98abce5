"""Predictions past the row bound are refused on every door, with one number and the same words
adapted to the door (the API's JSON body: its schema, ``test_api_predictions_row_bound.py``).

The console's **Upload the predictions** and ``typestrict training submit`` took a file of any
number of rows (250,000 rows were accepted in 7.4 s, docs/benchmarks.md) where the API refuses
more than 200,000: the same concept, two numbers. Now all three refuse past
``refund.manifest.MAX_PREDICTION_ROWS``, before anything is stored, and the console reads the
file no further than the row past the bound.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_console_pages import CSV, TRAINING, Browser, app  # noqa: F401  (the fixture)
from tests.test_training_cli_words import world  # noqa: F401  (the fixture)
from typestrict_pipeline.cli import main
from typestrict_pipeline.errors import PredictionsError
from typestrict_pipeline.refund.manifest import MAX_PREDICTION_ROWS
from typestrict_pipeline.refund.predictions import bounded_rows

ROW = b'{"id": "x", "decision": "sentiment", "probabilities": {"yes": 1}}\n'
PAST = (f"expected at most {MAX_PREDICTION_ROWS:,} rows, got more than {MAX_PREDICTION_ROWS:,} (the file was read "
        f"no further than row {MAX_PREDICTION_ROWS + 1:,}).")


def test_the_bound_is_the_apis() -> None:
    from typestrict_pipeline.api.schemas import PredictionsIn

    field = PredictionsIn.model_fields["predictions"]
    assert any(getattr(m, "max_length", None) == MAX_PREDICTION_ROWS == 200_000 for m in field.metadata)


def test_the_rows_are_read_no_further_than_the_row_past_the_bound() -> None:
    """The chunks after the one that passes the bound are never asked for (a 10 GB file costs
    what its first 200,001 rows cost)."""
    asked = []

    def chunks() -> Iterator[bytes]:
        for i in range(10**6):
            asked.append(i)
            yield ROW * 1000
        raise AssertionError("read to the end")

    with pytest.raises(PredictionsError, match=re.escape(PAST)):
        for _ in bounded_rows(chunks(), source="f", fix="x"):
            pass
    assert len(asked) == MAX_PREDICTION_ROWS // 1000 + 1
    blank = b"\n \n" + ROW  # blank lines are no rows, as the reader counts them
    assert len(b"".join(bounded_rows([blank * 3], source="f", fix="x", bound=3))) == 3 * len(blank)


def test_the_console_refuses_a_file_past_the_bound_in_its_words_and_stores_nothing(
        app: tuple[object, str, str]) -> None:  # noqa: F811
    b = Browser(app[0], app[1])
    made = b.form("/console/trainings", TRAINING, files={"dataset_file": ("reviews.csv", CSV.encode())})
    assert made.status_code == 303, made.text[:3000]
    page_url = made.headers["location"]
    training = page_url.rsplit("/", 1)[1]
    refused = b.form(f"{page_url}/predictions", {},
                     files={"predictions": ("every_row.jsonl", ROW * (MAX_PREDICTION_ROWS + 1) + ROW * 50_000)})
    assert refused.status_code == 422, refused.text[:3000]
    said = re.search(r'id="error"[^>]*>(.*?)</p>', refused.text, flags=re.S)
    assert said is not None, refused.text[:3000]
    assert html.unescape(said.group(1)).strip() == (
        f"your file 'every_row.jsonl': {PAST} Upload the predictions of the split's test examples only (the split "
        "on this page lists them, at most 2,000 per decision), not every row of the dataset; nothing was stored "
        "or charged and the training still accepts its predictions: correct them and upload the file again with "
        "Upload and judge.")
    shown = b.get(f"/v1/trainings/{training}").json()
    assert shown["state"] == "awaiting_predictions" and shown["submissions"] == 0
    b.close()


def test_the_cli_refuses_a_file_past_the_bound_in_its_words_and_stores_nothing(
        world: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    tid, url = world["tid"], world["url"]
    big = tmp_path / "every_row.jsonl"
    big.write_bytes(ROW * (MAX_PREDICTION_ROWS + 1))
    assert main(["training", "submit", tid, str(big), "--store", url]) == 2
    err = capsys.readouterr().err
    assert (f"{big}: {PAST} Submit the predictions of the split's test examples only (`typestrict split` on the "
            "training's manifest shows them, at most 2,000 per decision), not every row of the dataset; nothing was "
            "stored or charged and the training still accepts its predictions: correct them and run "
            f"`typestrict training submit {tid} PREDICTIONS.jsonl` again.") in err, err
    assert "GET /v1" not in err
    assert world["store"].view("acme", tid).state.value == "awaiting_predictions"
    assert main(["training", "submit", tid, str(world["predictions"]), "--store", url]) == 0  # the test rows: taken
