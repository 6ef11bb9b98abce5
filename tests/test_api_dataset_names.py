"""A dataset name means one dataset: a workspace cannot register one under a built-in's name.

``POST /v1/datasets {"name": "seattle_weather", ...}`` was accepted (201) and listed as the
workspace's ``seattle_weather``, while every backtest and study naming ``seattle_weather`` read
the built-in data (``datasets.resolve`` looks at the built-ins first): the customer's rows were
never used and nothing said so. It is now refused like any name already taken (409), before
anything is stored.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from fastapi.testclient import TestClient

from tests.test_api_support import new_key
from typestrict_pipeline.api.app import create_app
from typestrict_pipeline.backtest.workflows import DATASETS

JEV = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "jev"}  # never asked here


def test_a_built_in_datasets_name_cannot_be_registered(tmp_path: Path) -> None:
    from typestrict_pipeline.backtest.workflows.weather import write_seattle_csv

    url = f"sqlite:///{tmp_path / 'store.db'}"
    auth = {"Authorization": f"Bearer {new_key(url, 'acme')}"}
    write_seattle_csv(tmp_path / "weather.csv", known_until=dt.datetime(2012, 3, 1, tzinfo=dt.UTC))
    with TestClient(create_app(url, tmp_path / "home", jev_source=JEV, rate_limit=None)) as c:
        assert c.put("/v1/files/weather.csv", content=(tmp_path / "weather.csv").read_bytes(),
                     headers=auth).status_code == 201
        assert "seattle_weather" in DATASETS
        body = {"name": "seattle_weather", "workflow": "seattle_rain", "tables": {"weather": "weather.csv"}}
        r = c.post("/v1/datasets", json=body, headers=auth)
        assert r.status_code == 409, r.text
        assert r.json()["error"] == {"code": "conflict", "message": (
            "expected a new dataset name, got 'seattle_weather', which is a built-in dataset (backtests and "
            "studies that name it read the built-in data). Register the file under another name, e.g. "
            "'seattle_weather_own'")}
        assert c.get("/v1/datasets", headers=auth).json() == []
        assert not (tmp_path / "home" / "datasets").exists() or not any((tmp_path / "home" / "datasets").iterdir())
        # another name is registered, and named in a backtest it is the workspace's own
        body["name"] = "seattle_weather_own"
        assert c.post("/v1/datasets", json=body, headers=auth).status_code == 201
