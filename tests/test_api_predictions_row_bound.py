"""Predictions past the API's row bound say how many were sent and what to send instead.

``POST /v1/trainings/{id}/predictions`` takes at most 200,000 rows (its JSON body is decoded
whole). A customer of a large dataset who posts every row's probabilities, as the walkthrough's
small example does, got "predictions: expected at most 200000 items, got [{'decision': 'd', 'id':
'ex000000', 'probabilities': {...}}, {'decision': 'd', . Fix the request": no count, nothing on
what to send. The refusal now counts the rows and says to send the test examples' predictions
only (the split lists them), through a real server, before anything is stored.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_api_support import TRAINING_BODY, ApiServer, make_dataset, new_key


def test_predictions_past_the_row_bound_say_to_send_the_test_rows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    key = new_key(url, "acme", credits=1)
    csv, jev = make_dataset(tmp_path)
    with ApiServer(url, tmp_path / "home", rate_limit=None, jev_source={"kind": "file", "path": str(jev)}) as server, \
            server.client(key) as client:
        assert client.put("/v1/files/reviews.csv", content=csv).status_code == 201
        created = client.post("/v1/trainings", json=TRAINING_BODY)
        assert created.status_code == 201, created.text
        tid = created.json()["id"]
        row = '{"id":"x","decision":"sentiment","probabilities":{"yes":1}}'
        body = '{"predictions":[' + ",".join([row] * 200_001) + "]}"
        r = client.post(f"/v1/trainings/{tid}/predictions", content=body.encode(),
                        headers={"Content-Type": "application/json"})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["message"] == (
            "predictions: expected at most 200,000 items, got 200,001 items. Send the predictions "
            "of the split's test examples only (GET /v1/trainings/{id}/split lists them as "
            "test_ids, at most 2,000 per decision), not every row of the dataset. Fix the request "
            "(the schema is at /v1/openapi.json)")
        assert client.get(f"/v1/trainings/{tid}").json()["state"] == "awaiting_predictions"
        assert json.loads(client.get(f"/v1/trainings/{tid}").text)["submissions"] == 0
