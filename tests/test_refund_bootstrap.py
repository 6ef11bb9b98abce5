"""The paired bootstrap: numpy producer vs plain Python bit for bit; the stream and the seed."""

from __future__ import annotations

import hashlib
import random
import struct

import numpy as np
import pytest

from typestrict_pipeline import verify_audit
from typestrict_pipeline.refund.bootstrap import (
    bootstrap_gains,
    gains_python,
    q05_index,
    summarize,
)
from typestrict_pipeline.refund.metrics import example_values
from typestrict_pipeline.refund.rule import canonical_rows
from typestrict_pipeline.refund.stream import (
    bootstrap_seed,
    resample_indices,
    resample_indices_python,
)
from typestrict_pipeline.refund.synthetic import synthetic_decision


def _bits(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


@pytest.mark.parametrize("case", range(40))
def test_numpy_gains_equal_plain_python_bit_for_bit(case: int) -> None:
    rng = random.Random(case)
    data = synthetic_decision(
        seed=case,
        n=rng.randrange(1, 70),
        n_answers=rng.randrange(2, 7),
        ties=case % 2 == 0,
        multiple_choice=case % 5 == 0,
        skew=rng.choice([0.0, 2.0]),
        model_skill=rng.random(),
        jev_skill=rng.random(),
    )
    rows, _ = canonical_rows(data)
    y = [r.y for r in rows]
    k = len(data.answers)
    a = example_values(y, [r.p_model for r in rows])
    b = example_values(y, [r.p_jev for r in rows])
    seed = bootstrap_seed(data.name, [r.text_sha256 for r in rows])
    fast = bootstrap_gains(y, a, b, k, seed, 300).tolist()
    slow = gains_python(y, a, b, k, seed, 300)
    assert _bits(fast) == _bits(slow)
    # the verifier's own (independent, optimised) implementation gives the same bits too
    va = verify_audit.SystemValues(y, [r.p_model for r in rows])
    vb = verify_audit.SystemValues(y, [r.p_jev for r in rows])
    assert _bits(verify_audit.gains(y, va, vb, k, seed, 300)) == _bits(fast)


@pytest.mark.parametrize("n", [5000, 70000])
def test_large_decisions_stay_exact(n: int) -> None:
    # n = 5000: 2 * n * 2**40 > 2**53, so int -> float would round; the producer divides exactly.
    # n = 70000: past 2**16 rows, the verifier's packed counters switch to 32-bit slots and the
    # producer's ranks no longer fit int16.
    data = synthetic_decision(seed=7, n=n, n_answers=3)
    rows, _ = canonical_rows(data)
    y = [r.y for r in rows]
    pm, pj = [r.p_model for r in rows], [r.p_jev for r in rows]
    a, b = example_values(y, pm), example_values(y, pj)
    fast = bootstrap_gains(y, a, b, 3, bytes(32), 3).tolist()
    assert _bits(fast) == _bits(gains_python(y, a, b, 3, bytes(32), 3))
    va, vb = verify_audit.SystemValues(y, pm), verify_audit.SystemValues(y, pj)
    assert _bits(verify_audit.gains(y, va, vb, 3, bytes(32), 3)) == _bits(fast)


def test_stream_is_the_documented_shake256_multiply_shift() -> None:
    seed = hashlib.sha256(b"x").digest()
    n, resamples = 37, 5
    data = hashlib.shake_256(b"typestrict-refund-resample-v1\x00" + seed).digest(4 * n * resamples)
    words = struct.unpack(f"<{n * resamples}I", data)
    expected = [[(words[b * n + j] * n) >> 32 for j in range(n)] for b in range(resamples)]
    assert resample_indices_python(seed, n, resamples) == expected
    assert resample_indices(seed, n, resamples).tolist() == expected


def test_numpy_and_python_streams_agree_at_full_size() -> None:
    seed = bytes(range(32))
    assert np.array_equal(
        resample_indices(seed, 2000, 200), np.asarray(resample_indices_python(seed, 2000, 200))
    )


def test_seed_is_order_independent_and_domain_separated() -> None:
    hashes = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(10)]
    shuffled = hashes[:]
    random.Random(3).shuffle(shuffled)
    assert bootstrap_seed("d", hashes) == bootstrap_seed("d", shuffled)
    assert bootstrap_seed("d", hashes) != bootstrap_seed("e", hashes)
    assert bootstrap_seed("d", hashes) != bootstrap_seed("d", hashes[:-1])
    expected = hashlib.sha256(
        b"typestrict-refund-seed-v1\x00d\x00" + b"".join(sorted(bytes.fromhex(h) for h in hashes))
    ).digest()
    assert bootstrap_seed("d", shuffled) == expected


def test_seed_known_answer() -> None:
    # pinned so the published algorithm cannot drift silently
    assert bootstrap_seed("spam", ["00" * 32]).hex() == hashlib.sha256(
        b"typestrict-refund-seed-v1\x00spam\x00" + bytes(32)
    ).hexdigest()
    assert resample_indices_python(bootstrap_seed("refund", ["00" * 32, "ff" * 32]), 3, 2) == [
        [0, 0, 1],
        [2, 0, 0],
    ]


@pytest.mark.parametrize("b", [1, 19, 20, 21, 100, 1999, 2000, 2001])
def test_q05_is_the_inverted_cdf_order_statistic(b: int) -> None:
    rng = np.random.default_rng(b)
    g = rng.normal(size=b)
    res = summarize(g.tolist(), bytes(32))
    assert res.q05_index == q05_index(b)
    assert res.q05 == float(np.percentile(g, 5, method="inverted_cdf"))
    assert res.n_gain_le_0 == int(np.sum(g <= 0))
    assert q05_index(2000) == 99


def test_q05_above_zero_iff_at_most_99_gains_le_zero() -> None:
    base = [0.01] * 2000
    for bad in (98, 99, 100, 101):
        g = [-0.01] * bad + base[bad:]
        res = summarize(g, bytes(32))
        assert res.n_gain_le_0 == bad
        assert res.gain_is_real == (bad <= 99)
    zeros = summarize([0.0] * 2000, bytes(32))
    assert not zeros.gain_is_real and zeros.n_gain_le_0 == 2000
