"""A prompt override of a step whose default is a template may use only the fields the workflow
fills: refused before the store is opened (or made), instead of every step failing on it
(``decide: KeyError: 'nope'``) in a stored backtest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from typestrict_pipeline.backtest.workflows import default_registry
from typestrict_pipeline.cli import main
from typestrict_pipeline.errors import InputError

FIELDS = ("{date}, {lookback_days}, {rainy_days}, {temp_max}, {temp_min}, {today_mm}, {total_mm}, {weather}, "
          "{wind}")


def _run(prompt: str, db: Path) -> int:
    return main(["backtest", "run", "seattle_rain", "--start", "2013-06-01", "--end", "2013-06-03",
                 "--standin-latency", "0", "--prompt", prompt, "--store", f"sqlite:///{db}", "--new-store", "--json"])


@pytest.mark.parametrize("prompt, got", [
    ("forecast=Say {nope}, then a number", "got {nope}."),
    ('forecast=Answer as JSON {"p": 0.5}', 'got {"p"}.'),
    ("forecast=Date {date.__class__}", "got {date.__class__}."),
    ("forecast=Date {date} }", "got a brace that opens or closes no field."),
])
def test_a_prompt_with_a_field_the_workflow_does_not_fill_is_refused_before_the_store(
    prompt: str, got: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "store.db"
    assert _run(prompt, db) == 2
    err = capsys.readouterr().err
    assert (f"typestrict: expected a prompt for step 'forecast' that uses only the fields the workflow fills "
            f"({FIELDS}), with {{{{ and }}}} for a literal brace, {got} Use those fields by name") in err
    assert not db.exists()


def test_a_prompt_step_the_workflow_does_not_have_is_refused_before_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "store.db"
    assert _run("nostep=hello", db) == 2
    assert "expected a prompt step of workflow 'seattle_rain' (forecast), got 'nostep'" in capsys.readouterr().err
    assert not db.exists()


def test_a_prompt_with_known_fields_and_literal_braces_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("forecast=On {date} ({total_mm:.2f} mm, {{not a field}}): the probability of rain?",
                tmp_path / "store.db") == 0
    ran = json.loads(capsys.readouterr().out)
    assert ran["status"] == "completed" and "3 scored, 0 unscored, 0 failed" in ran["card"]


def test_a_step_whose_default_is_plain_text_takes_any_text() -> None:
    wf = default_registry().active("seattle_rain")
    plain = wf.variant(prompts={"forecast": "no fields here"})  # its default now has no field
    assert plain.variant(prompts={"forecast": "a {brace} is text here"}).prompts["forecast"] == "a {brace} is text here"
    with pytest.raises(InputError, match=r"got \{nope\}"):
        wf.variant(prompts={"forecast": "{nope}"})


def test_activate_refuses_such_a_prompt_before_the_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "store.db"
    assert main(["backtest", "activate", "seattle_rain", "--prompt", "forecast=Say {nope}",
                 "--store", f"sqlite:///{db}", "--new-store"]) == 2
    assert "got {nope}. Use those fields by name" in capsys.readouterr().err
    assert not db.exists()


@pytest.mark.parametrize("command", [["backtest", "run", "seattle_rain", "--start", "2013-06-01", "--end", "2013-06-03"],
                                     ["backtest", "activate", "seattle_rain"]])
@pytest.mark.parametrize("given, said", [
    (["--param", "lookback_days=3", "--param", "lookback_days=4"],
     "expected each parameter once in --param, got lookback_days twice (the second lookback_days='4')"),
    (["--prompt", "forecast=On {date}?", "--prompt", "forecast=Rain?"],
     "expected each prompt step once in --prompt, got forecast twice (the second forecast='Rain?')"),
])
def test_a_parameter_or_prompt_given_twice_is_refused_not_replaced(
    command: list[str], given: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "store.db"
    assert main([*command, *given, "--store", f"sqlite:///{db}", "--new-store"]) == 2
    assert said in capsys.readouterr().err
    assert not db.exists()
