"""Refund: the group bootstrap, 2,000 examples in 200 groups x 20 answers x 2,000 resamples.

Times the product's producer (``bootstrap_gains`` with groups: SHAKE-256 stream, integer counts,
three metrics x two systems, G for every resample) against, in the same run:

(a) the scikit-learn loop: per resample, gather the drawn groups' rows and call ``f1_score``,
    ``brier_score_loss`` and a sort for selective accuracy (a subset, extrapolated);
(b) a short vectorised numpy implementation written the obvious way (numpy's generator, float
    matrix products through BLAS; about 30 lines; not bit-reproducible);
(c) the physical floor: numpy's generator draws every resample's groups and one ``bincount``
    counts them; and the same floor touching every (resample, row) pair once (the row weights
    every per-row metric needs);
(d) the floor that keeps our replayable stream: the SHAKE-256 draws + one ``bincount`` (and, again,
    + the row weights).

CPU seconds of this process are the figure to compare on a shared machine (wall is printed too).

Run: ``.venv/bin/python -m bench.bench_refund_group_bootstrap``
"""

from __future__ import annotations

import os
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from sklearn.metrics import brier_score_loss, f1_score

from bench.summary import row
from bench.timing import median_time
from typestrict_pipeline.refund.bootstrap import bootstrap_gains, group_members
from typestrict_pipeline.refund.metrics import example_values, f1_answers
from typestrict_pipeline.refund.rule import canonical_rows, group_indices
from typestrict_pipeline.refund.stream import bootstrap_seed, resample_indices
from typestrict_pipeline.refund.synthetic import synthetic_decision, with_groups

N, G, K, B = 2000, 200, 20, 2000
SKLEARN_SUBSET = 50



def naive_numpy(y: npt.NDArray[np.intp], groups: npt.NDArray[np.intp],
                systems: list[tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_],
                                    npt.NDArray[np.float64], npt.NDArray[np.float64]]],
                labels: list[int], rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """(b): the group bootstrap written the obvious vectorised way (floats, BLAS, numpy RNG)."""
    n_groups = int(groups.max()) + 1
    draws = rng.integers(0, n_groups, size=(B, n_groups))
    counts = np.zeros((B, n_groups))
    np.add.at(counts, (np.arange(B)[:, None], draws), 1.0)
    w = counts[:, groups]  # (B, n) weight of each row in each resample
    n_b = w.sum(axis=1)
    onehot_y = np.eye(K)[y]
    true = w @ onehot_y
    scores = []
    for pred, correct, conf, brier in systems:
        tp = w @ (onehot_y * correct[:, None])
        prd = w @ np.eye(K)[pred]
        den = true + prd
        f1 = np.divide(2 * tp, den, out=np.zeros_like(den), where=den > 0)[:, labels].mean(axis=1)
        bs = 1.0 - (w @ brier) / n_b / 2.0
        order = np.argsort(-conf, kind="stable")
        cum = np.cumsum(w[:, order], axis=1)
        m = np.ceil(0.8 * n_b)
        kept = np.minimum(w[:, order], np.clip(m[:, None] - (cum - w[:, order]), 0, None))
        sa = (kept * correct[order]).sum(axis=1) / m
        scores.append((f1, bs, sa))
    (f1a, bsa, saa), (f1b, bsb, sab) = scores
    gains: npt.NDArray[np.float64] = 0.5 * (f1a - f1b) + 0.3 * (bsa - bsb) + 0.2 * (saa - sab)
    return gains


def main() -> None:
    sizes = [N // G] * G
    data = with_groups(synthetic_decision(seed=2026, n=N, n_answers=K, model_skill=0.8,
                                          jev_skill=0.6), sizes)
    rows, _ = canonical_rows(data)
    gidx = group_indices(rows)
    assert gidx is not None
    y = [r.y for r in rows]
    pm, pj = [r.p_model for r in rows], [r.p_jev for r in rows]
    a, b = example_values(y, pm), example_values(y, pj)
    seed = bootstrap_seed(data.name, [r.text_sha256 for r in rows])

    bootstrap_gains(y, a, b, K, seed, B, gidx)  # warm: first-call set-up (BLAS pools found once)

    ya = np.asarray(y)
    ga = np.asarray(gidx)
    systems = []
    for ex, probs in ((a, pm), (b, pj)):
        p = np.asarray(probs)
        brier = ((p - np.eye(K)[ya]) ** 2).sum(axis=1)
        systems.append((np.asarray(ex.pred), np.asarray(ex.correct), np.asarray(ex.conf), brier))
    labels = list(f1_answers(y, K))
    rng = np.random.Generator(np.random.PCG64(0))
    w_naive, c_naive = median_time(lambda: naive_numpy(ya, ga, systems, labels, rng))

    members = [np.asarray(m) for m in group_members(gidx)]
    probs_a = [np.asarray(pm), np.asarray(pj)]

    def sklearn_loop(n_resamples: int) -> None:
        idx = resample_indices(seed, G, n_resamples)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for drawn in idx:
                rows_ = np.concatenate([members[g] for g in drawn])
                m = int(np.ceil(0.8 * len(rows_)))
                for (pred, correct, conf, _), probs in zip(systems, probs_a, strict=True):
                    f1_score(ya[rows_], pred[rows_], labels=labels, average="macro",
                             zero_division=0)
                    brier_score_loss(ya[rows_], probs[rows_], labels=list(range(K)),
                                     scale_by_half=True)
                    order = np.lexsort((rows_, -conf[rows_]))[:m]
                    correct[rows_][order].mean()

    t, c = time.perf_counter(), time.process_time()
    sklearn_loop(SKLEARN_SUBSET)
    w_sk = (time.perf_counter() - t) * B / SKLEARN_SUBSET
    c_sk = (time.process_time() - c) * B / SKLEARN_SUBSET

    offsets = (np.arange(B) * G)[:, None]

    def floor_numpy(rows_too: bool) -> None:
        draws = np.random.Generator(np.random.PCG64(1)).integers(0, G, size=(B, G))
        counts = np.bincount((draws + offsets).ravel(), minlength=B * G).reshape(B, G)
        if rows_too:
            counts[:, ga].sum()

    def floor_stream(rows_too: bool) -> None:
        draws = resample_indices(seed, G, B)
        counts = np.bincount((draws + offsets).ravel(), minlength=B * G).reshape(B, G)
        if rows_too:
            counts[:, ga].sum()

    # ours and the floors interleaved, 7 rounds, medians: on a shared machine the load drifts,
    # and each gets the same conditions (none runs alone in a tight, cache-warm loop)
    timed: dict[str, list[tuple[float, float]]] = {k: [] for k in ("ours", "c", "c'", "d", "d'")}
    fns: dict[str, Callable[[], object]] = {
        "ours": lambda: bootstrap_gains(y, a, b, K, seed, B, gidx),
        "c": lambda: floor_numpy(False), "c'": lambda: floor_numpy(True),
        "d": lambda: floor_stream(False), "d'": lambda: floor_stream(True)}
    for _ in range(7):
        for k, fn in fns.items():
            timed[k].append(median_time(fn, repeat=1))
    (w_ours, c_ours), (w_fc, c_fc), (w_fcr, c_fcr), (w_fd, c_fd), (w_fdr, c_fdr) = (
        (statistics.median(w for w, _ in timed[k]), statistics.median(c for _, c in timed[k]))
        for k in fns)

    print(f"refund group bootstrap: N={N} examples in G={G} groups x K={K} answers, B={B}; "
          f"CPU s (wall s), medians (ours and the floors: 7 interleaved rounds); load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores")
    rows_out = [
        ("ours: bootstrap_gains with groups (exact, replayable)", c_ours, w_ours),
        (f"(a) scikit-learn loop ({SKLEARN_SUBSET} resamples extrapolated)", c_sk, w_sk),
        ("(b) obvious vectorised numpy (floats, BLAS, numpy RNG)", c_naive, w_naive),
        ("(c) floor: numpy RNG draws + one bincount", c_fc, w_fc),
        ("(c') floor + row weights (every resample x row once)", c_fcr, w_fcr),
        ("(d) floor with our stream: SHAKE-256 draws + one bincount", c_fd, w_fd),
        ("(d') floor with our stream + row weights", c_fdr, w_fdr),
    ]
    for label, cpu, wall in rows_out:
        print(f"  {label:<58} CPU {cpu:7.3f} s (wall {wall:7.3f} s)  ours / this: "
              f"{c_ours / cpu:6.2f}")
    name = "bench_refund_group_bootstrap"
    what = f"group bootstrap, {N} examples in {G} groups x {K} answers, B = {B} (CPU)"
    row(name, what + " vs the floor with our stream", f"{c_ours:.3f} s",
        alternative=f"SHAKE-256 draws + one bincount {c_fd:.3f} s", ratio=f"{c_ours / c_fd:.1f}x",
        target="<= 3x the floor with our stream", ok=c_ours <= 3 * c_fd,
        numbers={"ours_cpu": c_ours, "floor_stream_cpu": c_fd, "ours_wall": w_ours})
    row(name, what + " vs obvious vectorised numpy", f"{c_ours:.3f} s",
        alternative=f"numpy RNG + float BLAS {c_naive:.3f} s", ratio=f"ours {c_naive / c_ours:.1f}x faster",
        numbers={"naive_cpu": c_naive})
    row(name, what + " vs scikit-learn loop", f"{c_ours:.3f} s",
        alternative=f"sklearn per resample {c_sk:.1f} s (extrapolated x{B // SKLEARN_SUBSET})",
        ratio=f"ours {c_sk / c_ours:.0f}x faster", numbers={"sklearn_cpu": c_sk})
    row(name, what + " vs the physical floor", f"{c_ours:.3f} s",
        alternative=f"numpy RNG + one bincount {c_fc:.3f} s", ratio=f"{c_ours / c_fc:.1f}x",
        numbers={"floor_numpy_cpu": c_fc})


if __name__ == "__main__":
    main()
