"""Refund: the paired bootstrap and metrics (2,000 examples x 20 answers, B = 2,000).

Times the numpy producer (stream + counts + 3 metrics x 2 systems + G for every resample) and the
whole ``judge_decision`` (validation, per-example values, point metrics, bootstrap), against a
straightforward loop that calls scikit-learn on each resample. The sklearn loop is timed on a
subset of resamples and extrapolated to 2,000 (said in the output).

Run: ``.venv/bin/python -m bench.bench_refund_bootstrap``
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np
from sklearn.metrics import brier_score_loss, f1_score

from bench.summary import row
from bench.timing import median_time
from typestrict_pipeline.refund.bootstrap import bootstrap_gains
from typestrict_pipeline.refund.metrics import example_values, f1_answers
from typestrict_pipeline.refund.rule import canonical_rows, judge_decision
from typestrict_pipeline.refund.stream import bootstrap_seed, resample_indices
from typestrict_pipeline.refund.synthetic import synthetic_decision

N, K, B = 2000, 20, 2000
SKLEARN_SUBSET = 100



def main() -> None:
    data = synthetic_decision(seed=2026, n=N, n_answers=K, model_skill=0.8, jev_skill=0.6)
    rows, _ = canonical_rows(data)
    y = [r.y for r in rows]
    pm = [r.p_model for r in rows]
    pj = [r.p_jev for r in rows]
    a, b = example_values(y, pm), example_values(y, pj)
    seed = bootstrap_seed(data.name, [r.text_sha256 for r in rows])

    t_boot = median_time(lambda: bootstrap_gains(y, a, b, K, seed, B))
    t_judge = median_time(lambda: judge_decision(data, resamples=B))

    # Straightforward: per resample, index the arrays and call scikit-learn for each system.
    ya = np.asarray(y)
    labels = list(f1_answers(y, K))
    systems = []
    for ex, probs in ((a, pm), (b, pj)):
        systems.append((np.asarray(ex.pred), np.asarray(ex.correct), np.asarray(ex.conf),
                        np.asarray(probs)))
    m = (4 * N + 4) // 5
    pos = np.arange(N)

    def sklearn_loop(n_resamples: int) -> list[float]:
        idx = resample_indices(seed, N, n_resamples)
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for draw in idx:
                vals = []
                for pred, correct, conf, probs in systems:
                    mf = f1_score(ya[draw], pred[draw], labels=labels, average="macro",
                                  zero_division=0)
                    bs = 1.0 - brier_score_loss(ya[draw], probs[draw], labels=list(range(K)),
                                                scale_by_half=True)
                    order = np.lexsort((pos[draw], -conf[draw]))[:m]
                    sa = correct[draw][order].mean()
                    vals.append((mf, bs, sa))
                (mf1, bs1, sa1), (mf2, bs2, sa2) = vals
                out.append(0.5 * (mf1 - mf2) + 0.3 * (bs1 - bs2) + 0.2 * (sa1 - sa2))
        return out

    t, c = time.perf_counter(), time.process_time()
    slow = sklearn_loop(SKLEARN_SUBSET)
    t_sub, c_sub = time.perf_counter() - t, time.process_time() - c
    t_sklearn, c_sklearn = t_sub * B / SKLEARN_SUBSET, c_sub * B / SKLEARN_SUBSET
    fast = bootstrap_gains(y, a, b, K, seed, SKLEARN_SUBSET)
    max_diff = float(np.max(np.abs(np.asarray(slow) - fast)))

    (w_boot, c_boot), (w_judge, c_judge) = t_boot, t_judge
    print(f"refund bootstrap: N={N} examples x K={K} answers, B={B} resamples, median of 3; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"  numpy producer (stream + metrics + G): wall {w_boot:.3f} s, CPU {c_boot:.3f} s")
    print(f"  judge_decision (validation + point metrics + bootstrap): wall {w_judge:.3f} s, "
          f"CPU {c_judge:.3f} s")
    print(f"  sklearn loop: wall {t_sub:.2f} s, CPU {c_sub:.2f} s for {SKLEARN_SUBSET} resamples "
          f"-> extrapolated to {B}: wall {t_sklearn:.1f} s, CPU {c_sklearn:.1f} s")
    print(f"  speed-up vs sklearn loop (CPU): producer {c_sklearn / c_boot:.0f}x, "
          f"judge_decision {c_sklearn / c_judge:.0f}x; (wall): producer {t_sklearn / w_boot:.0f}x, "
          f"judge_decision {t_sklearn / w_judge:.0f}x")
    print(f"  max |G_sklearn - G_ours| over the subset: {max_diff:.2e} (float rounding only)")
    row("bench_refund_bootstrap", f"row bootstrap + metrics + G, {N} x {K} answers, B = {B} (CPU)",
        f"{c_boot:.3f} s", alternative=f"scikit-learn per resample {c_sklearn:.1f} s (extrapolated)",
        ratio=f"ours {c_sklearn / c_boot:.0f}x faster", target=">= 100x the scikit-learn loop",
        ok=c_sklearn / c_boot >= 100, numbers={"ours_cpu": c_boot, "sklearn_cpu": c_sklearn,
                                                "judge_cpu": c_judge})


if __name__ == "__main__":
    main()
