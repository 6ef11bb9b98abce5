"""Refund: the standalone verifier on an audit of 2,000 examples x 20 answers (B = 2,000).

Builds one audit, writes it to a temporary folder with a copy of ``verify_audit.py``, and times
``python3 -I verify_audit.py audit.json`` end to end (process start, JSON parsing, every check),
against the straightforward plain-Python recomputation of the resamples (``gains_python``, which
rebuilds the counts draw by draw), timed on a subset and extrapolated.

Run: ``.venv/bin/python -m bench.bench_refund_verifier``
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import typestrict_pipeline.verify_audit as verify_audit
from typestrict_pipeline.refund.audit import build_audit, write_audit
from typestrict_pipeline.refund.bootstrap import gains_python
from typestrict_pipeline.refund.metrics import example_values
from typestrict_pipeline.refund.rule import canonical_rows, judge
from typestrict_pipeline.refund.stream import bootstrap_seed
from typestrict_pipeline.refund.synthetic import synthetic_decision

N, K, B = 2000, 20, 2000
SUBSET = 200


def main() -> None:
    data = synthetic_decision(seed=2026, n=N, n_answers=K, model_skill=0.8, jev_skill=0.6)
    audit = build_audit(judge([data], keep_if_loses=False), training_id="bench",
                        model_id="bench-model", jev_id="jev")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        shutil.copy(verify_audit.__file__, folder / "verify_audit.py")
        path = write_audit(folder / "audit.json", audit)
        size = path.stat().st_size
        times, cpus = [], []
        for _ in range(3):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            done = subprocess.run([sys.executable, "-I", "verify_audit.py", "audit.json"],
                                  cwd=folder, capture_output=True, text=True, check=False)
            times.append(time.perf_counter() - t)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            if done.returncode != 0:
                raise SystemExit(f"verifier failed: {done.stdout}{done.stderr}")
    t_verify, c_verify = statistics.median(times), statistics.median(cpus)

    rows, _ = canonical_rows(data)
    y = [r.y for r in rows]
    a = example_values(y, [r.p_model for r in rows])
    b = example_values(y, [r.p_jev for r in rows])
    seed = bootstrap_seed(data.name, [r.text_sha256 for r in rows])
    c = time.process_time()
    gains_python(y, a, b, K, seed, SUBSET)
    c_plain = (time.process_time() - c) * B / SUBSET

    print(f"refund verifier: N={N} examples x K={K} answers, B={B}, audit {size / 1e6:.1f} MB; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"  python3 -I verify_audit.py audit.json (whole run, median of 3): wall {t_verify:.2f} s, "
          f"CPU {c_verify:.2f} s (target <= 5 s on one core)")
    print(f"  plain-Python resampling (gains_python, {SUBSET} resamples extrapolated): "
          f"CPU {c_plain:.1f} s for the resamples alone -> verifier {c_plain / c_verify:.1f}x "
          f"faster (CPU)")


if __name__ == "__main__":
    main()
