"""Every message of the product pages, character for character, in what the product prints.

The messages are read from the pages themselves (``docs/pages/``, copies of the product pages
the project implements; checked against ``/work/shared/seeds`` when that folder exists): the
quoted sentences, the message and column tables, and the answers of "Common questions" that
are messages. Each must be found verbatim in the output of the product: ``typestrict`` commands
on a real store (a study whose holdout the budget could not afford, its leaderboard, usage, a
second study on a busy workflow, a USD budget with no backtest), the lineage panel, the
schedule's skip reasons and the notification's title. Where the product adds something (a
command to run, the limit that was reached), it is on its own line after the page's sentence,
so the sentence is still whole.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from typestrict_pipeline.cli import main
from typestrict_pipeline.reruns.decide import (
    PreviousOutcome,
    SubscriptionState,
    TickState,
    decide_tick,
)
from typestrict_pipeline.reruns.lineage import LineageEntry, render_panel
from typestrict_pipeline.reruns.notify import KIND_TITLES
from typestrict_pipeline.store import open_store
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.folds import plan_folds
from typestrict_pipeline.study.limits import StudyLimits
from typestrict_pipeline.study.runner import SyntheticBackend, run_study_local
from typestrict_pipeline.study.space import SearchSpace

PAGES = Path(__file__).resolve().parent.parent / "docs" / "pages"
STUDIES_PAGE = PAGES / "003_backtests_and_studies.en.md"
REFUND_PAGE = PAGES / "001_6e857d21bc52fa08.txt"
SHARED = Path("/work/shared/seeds")


def _table(text: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table whose header row starts with ``| header |``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def _answer(text: str, question: str) -> str:
    """The answer of one of "Common questions" (the text after the italic question)."""
    match = re.search(r"- \*" + re.escape(question) + r"\* (.*?)(?=\n- \*|\Z)", text, flags=re.S)
    assert match is not None, question
    return " ".join(match.group(1).split())


def page_messages() -> list[str]:
    """The pages' messages, read from the pages."""
    studies = STUDIES_PAGE.read_text(encoding="utf-8")
    out: list[str] = []
    # the skip reasons, as the "Message" column writes them (two alternatives in one cell)
    for row in _table(studies, "Message"):
        out += row[0].split(" / ")
    # the leaderboard's columns and the limits
    out += [row[0] for row in _table(studies, "Column")]
    out += [row[0] for row in _table(studies, "Limit")]  # the two required limits
    out += [row[0] for row in _table(studies[studies.index("A third is optional"):], "Limit")]
    studies_joined = " ".join(studies.split())
    # quoted sentences that are messages
    out += [q for q in re.findall(r'"([^"]+)"', studies_joined)
            if q in ("A scheduled study changes its winner", "within noise")]
    # the estimate's sentence, as the page gives it
    estimate = re.search(r"for example (≈ \$[0-9.]+ for .*? \+ the holdout)\.", studies_joined)
    assert estimate is not None
    out.append(estimate.group(1))
    # the answers that are messages
    out += re.split(r"(?<=\.) ", _answer(studies, "Why is the holdout missing?"))
    out.append(_answer(studies, "Can I run two studies on one workflow at once?").removeprefix("No. "))
    refused = _answer(studies, "Why was my study refused when I entered a budget?")
    out += re.split(r"(?<=\.) ", refused)
    # what the page puts in bold that the product names
    for bold in ("Budget reached", "Spend", "HISTORICAL"):
        assert f"**{bold}**" in studies
        out.append(bold)
    assert "**Best expected of k\nunder noise**" in studies or "**Best expected of k under noise**" in studies
    out.append("Best expected of 2 under noise")
    refund = REFUND_PAGE.read_text(encoding="utf-8")
    out += [row.split(" | ")[0] for row in refund.splitlines()
            if re.fullmatch(r"[a-z_0-9]+ \| .*", row)]  # the four metrics' names
    # the weighted gain, as the page writes it, and its number of resamples
    formula = re.search(r"G = 0\.5 × Δmacro_f1 \+ [^\n]*?selective_acc_80", refund)
    assert formula is not None
    out.append(formula.group(0))
    resamples = re.search(r"We resample the test examples ([0-9,]+) times", refund)
    assert resamples is not None
    out.append(f"over {resamples.group(1)} paired resamples")
    return list(dict.fromkeys(out))


#: SHA-256 of each product page as copied from the shared seed folder (2026-12-01): the copies
#: in docs/pages are checked against these everywhere, and against the seed folder itself where
#: that folder is on the machine (it need not be on a CI machine; the check never skips).
PAGE_SHA256 = {
    "000_df43b90412ca1b5b.txt": "e83bc75d02be99f557f5e9cc39fd19717bd2f64a97d7b0b9f31a1e9696166659",
    "001_6e857d21bc52fa08.txt": "47dc872fd60d1096afb0137a783b2f02945757df5b591e75593db2a89611757a",
    "003_9df0d9eb697a93d8.txt": "776792f5b8ecacfb78a1c19c475369db880bb95d4fe3d71ee88ff66a835e9082",
    "003_backtests_and_studies.en.md": "18b4c11673b97c4428a9d9a0b21e85676cab70523559ccb0876fdccff5c61df7",
    "README.md": "bcc9040bc0d1bfc26d93026ebfe6122e1ecd2845e11c827e1020cebbeee6989e",
}


def test_the_pages_here_are_the_product_pages() -> None:
    here = {page.name: hashlib.sha256(page.read_bytes()).hexdigest() for page in PAGES.iterdir()}
    assert here == PAGE_SHA256
    if SHARED.is_dir():
        for page in PAGES.iterdir():
            assert page.read_bytes() == (SHARED / page.name).read_bytes(), page.name


def test_the_page_messages_are_read_from_the_pages() -> None:
    messages = page_messages()
    for expected in ("Not enough unseen data yet: 7 of 20 steps", "Overfit gap", "Budget (USD)",
                     "≈ $0.01 for 2 candidates × 2 folds × 2 windows + the holdout",
                     "The budget was reached before the winner's holdout run.",
                     "One study at a time per workflow; cancel the running one or wait for it to finish.",
                     "usage budget exhausted", "worst_class_f1"):
        assert expected in messages, expected
    assert len(messages) >= 30


def _cli(*args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main(list(args))
    return out.getvalue() + err.getvalue()


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Everything the product prints in the scenarios of the pages."""
    home = tmp_path_factory.mktemp("seed-home")
    url = f"sqlite:///{home / 'store.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TYPESTRICT_HOME", str(home))
        mp.delenv("TYPESTRICT_STORE_URL", raising=False)
        engine = open_store(url)
        utc = dt.UTC
        layout = plan_folds(start=dt.datetime(2012, 1, 1, tzinfo=utc),
                            end=dt.datetime(2012, 12, 1, tzinfo=utc), step=dt.timedelta(days=1),
                            n_folds=2, tune_steps=20, eval_steps=20, holdout_steps=20)
        # 3 candidates, 2 admitted by Max candidates: 2 × 2 folds × 2 windows × 20 steps + the
        # holdout (2 × 20) = 200 steps at 60 µ$ a step: ≈ $0.01, as in the page; a budget that
        # cannot afford the holdout
        sid = repo.create_study(
            engine, workspace="demo", workflow="wx", workflow_version="v1",
            space=SearchSpace(grid={"skill": [0.5, 0.6, 0.7]}), layout=layout,
            limits=StudyLimits(2, 10_000, 10_000), last_backtest=repo.LastBacktest(6_000, 100))
        run_study_local(engine, sid, SyntheticBackend(cost_per_step=60), max_workers=2)
        parts = [_cli("study", "leaderboard", str(sid), "--store-url", url)]
        parts.append(_cli("usage", "demo", "--store-url", url))
        # a second study on a workflow whose study is in flight
        repo.create_study(engine, workspace="demo", workflow="busy", workflow_version="synthetic",
                          space=SearchSpace(grid={"skill": [0.5]}), layout=layout,
                          limits=StudyLimits(1, 10_000))
        common = ["--start", "2012-01-01", "--end", "2012-12-01", "--folds", "2", "--tune-steps",
                  "20", "--eval-steps", "20", "--holdout-steps", "20", "--grid", "skill=0.5,0.6",
                  "--max-candidates", "2", "--max-total-steps", "1000", "--synthetic",
                  "--store-url", url]
        parts.append(_cli("study", "run", "busy", *common))
        parts.append(_cli("study", "run", "fresh", *common, "--budget-usd", "1"))
        without = [a for a in common if a not in ("--max-total-steps", "1000")]
        parts.append(_cli("study", "run", "fresh", *without))
        engine.dispose()
    # the lineage panel of a lineage whose best is within noise
    parts.append(render_panel([
        LineageEntry(0, "1", "FINISHED", "w0", "#1", 0.50, 0.50, 0.02, None),
        LineageEntry(1, "2", "FINISHED", "w1", "#2", 0.49, 0.50, 0.02, True),
    ]))
    # the schedule's skip reasons, one per row of the page's table
    base = TickState("1", 1, True, 10_000, SubscriptionState.ACTIVE, 5_000_000, 0,
                     PreviousOutcome.FINISHED, "1", 100, False, 107, 20)
    import dataclasses

    for change in ({}, {"workflow_in_flight": True}, {"previous": PreviousOutcome.NOT_FINISHED},
                   {"root_budget_micro_usd": None}, {"root_exists": False},
                   {"subscription": SubscriptionState.EXPIRED},
                   {"usage_spent_micro_usd": 5_000_000}):
        skip = decide_tick(dataclasses.replace(base, **change))
        parts.append(getattr(skip, "message", ""))
    parts += list(KIND_TITLES.values())
    # the refund's metrics, as the verdict's report shows them (Dagster's verdict asset)
    from assets.refund import verdict_markdown
    from typestrict_pipeline.refund.rule import judge
    from typestrict_pipeline.refund.synthetic import synthetic_decision

    parts.append(verdict_markdown(judge([synthetic_decision(seed=1, n=30, n_answers=2)],
                                        keep_if_loses=False)))
    yield "\n".join(parts)


@pytest.mark.parametrize("message", page_messages())
def test_every_page_message_is_printed_verbatim(printed: str, message: str) -> None:
    assert message in printed, f"{message!r} is not in what the product prints"


def test_additions_come_on_their_own_line_after_the_pages_sentence(printed: str) -> None:
    lines = printed.splitlines()
    for sentence, addition in (
        ("One study at a time per workflow; cancel the running one or wait for it to finish.",
         "To cancel it: typestrict study cancel 2"),
        ("Raise the budget and run the study again to get it.", "Limit reached: Budget (USD)."),
    ):
        at = next(i for i, line in enumerate(lines) if line.rstrip(" |").endswith(sentence))
        assert addition in lines[at + 1], (lines[at], lines[at + 1])
