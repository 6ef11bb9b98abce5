"""``typestrict schedule data-arrived`` (``record_data_end``): the recorded data end never moves
back, so the command says so instead of claiming to have written an earlier one, and a data end
in the future (a typo, 2199) is refused: kept for good, it made every tick count the steps up to
it as unseen, and fire re-runs whose holdouts had no outcome to score."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from typestrict_pipeline.cli import main
from typestrict_pipeline.errors import InputError
from typestrict_pipeline.reruns.decide import SubscriptionState
from typestrict_pipeline.reruns.studies import record_data_end, recorded_data_end
from typestrict_pipeline.reruns.workspace import set_workspace
from typestrict_pipeline.store import open_store

UTC = dt.UTC
JUNE = dt.datetime(2013, 6, 1, tzinfo=UTC)


def test_a_data_end_in_the_future_is_refused_and_an_earlier_one_changes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_store(url)
    set_workspace(engine, "acme", subscription=SubscriptionState.ACTIVE, usage_budget_micro_usd=1)

    def arrived(end: str) -> tuple[int, str, str]:
        code = main(["schedule", "data-arrived", "acme", "wx", end, "--store", url])
        said = capsys.readouterr()
        return code, said.out, said.err

    assert arrived("2013-06-01T00:00:00Z")[0] == 0
    code, out, _ = arrived("2013-05-01T00:00:00Z")  # earlier: nothing is written, and it says so
    assert code == 0 and "acme/wx: outcomes known up to 2013-06-01T00:00:00+00:00\n" in out, out
    assert ("wrote nothing to the store " in out and ": the data end of acme/wx is 2013-06-01T00:00:00+00:00 "
            "already, after 2013-05-01T00:00:00+00:00 (it never moves back)" in out), out
    code, _, err = arrived("2199-01-01T00:00:00Z")  # was recorded, for good
    assert code == 2 and "expected a data end at or before now" in err, err
    assert recorded_data_end(engine, "acme", "wx") == JUNE

    now = dt.datetime(2026, 12, 1, tzinfo=UTC)
    with pytest.raises(InputError, match=r"^expected a data end at or before now \(2026-12-01T00:00:00\+00:00\), "
                                         r"got 2026-12-02T00:00:00\+00:00\. Record it once the outcomes are known"):
        record_data_end(engine, "acme", "wx", now + dt.timedelta(days=1), now=now)
    assert record_data_end(engine, "acme", "wx", JUNE - dt.timedelta(days=30), now=now) == JUNE
    assert record_data_end(engine, "acme", "wx", now, now=now) == now
