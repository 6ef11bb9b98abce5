"""Refund: the standalone verifier on an audit of 2,000 examples x 20 answers (B = 2,000).

Builds one audit, writes it to a temporary folder with a copy of ``verify_audit.py``, and times
``python3 -I verify_audit.py audit.json`` end to end (process start, JSON parsing, every check),
against the straightforward plain-Python recomputation of the resamples (``gains_python``, which
rebuilds the counts draw by draw), timed on a subset and extrapolated. Then the same for the
group bootstrap (the examples in 200 groups of 10), and the verifier's whole run on hostile files
of about 50 MB and on the largest audits it accepts without ``--large`` (the "at most 5 s on any
input of at most 50 MB" bound).

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
from typing import Any

import typestrict_pipeline.verify_audit as verify_audit
from typestrict_pipeline.refund.audit import build_audit, write_audit
from typestrict_pipeline.refund.bootstrap import gains_python
from typestrict_pipeline.refund.metrics import example_values
from typestrict_pipeline.refund.rule import canonical_rows, judge
from typestrict_pipeline.refund.stream import bootstrap_seed
from typestrict_pipeline.refund.synthetic import synthetic_decision, with_groups

N, K, B = 2000, 20, 2000
SUBSET = 200


def main() -> None:
    data = synthetic_decision(seed=2026, n=N, n_answers=K, model_skill=0.8, jev_skill=0.6)
    audit = build_audit(judge([data], keep_if_loses=False), training_id="bench",
                        model_id="bench-model", jev_id="jev")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _audit_folder(folder, audit)
        size = path.stat().st_size
        runs = [_run_verifier(folder, path.name) for _ in range(3)]
        if any(code != 0 for _, _, code in runs):
            raise SystemExit(f"verifier failed on the benchmark's audit: exit codes {[r[2] for r in runs]}")
    t_verify = statistics.median(r[0] for r in runs)
    c_verify = statistics.median(r[1] for r in runs)

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
    grouped_and_hostile()


def _audit_folder(folder: Path, audit: dict[str, Any]) -> Path:
    """``folder`` as a customer receives it: the standalone verifier beside ``audit.json``."""
    shutil.copy(verify_audit.__file__, folder / "verify_audit.py")
    return write_audit(folder / "audit.json", audit)


def _run_verifier(folder: Path, name: str, *args: str) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-I", "verify_audit.py", *args, name], cwd=folder,
                          capture_output=True, text=True, check=False, timeout=600)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if "Traceback" in done.stderr:
        raise SystemExit(f"verifier printed a traceback on {name}: {done.stderr[-500:]}")
    return wall, cpu, done.returncode


def _hostile_files(folder: Path) -> dict[str, Path]:
    size = 50 * 10**6
    out: dict[str, bytes] = {
        "50 MB of integers in a list": b'{"a":[' + b"1," * (size // 2 - 8) + b"1]}",
        "50 MB of floats in a list": b'{"a":[' + b"0.1," * (size // 4 - 8) + b"0.1]}",
        "50 MB of empty objects": b'{"a":[' + b"{}," * (size // 3 - 8) + b"{}]}",
        "50 MB of empty lists": b'{"a":[' + b"[]," * (size // 3 - 8) + b"[]]}",
        "50 MB string": b'{"a":"' + b"x" * (size - 10) + b'"}',
        "50 MB nesting": b'{"a":' + b"[" * (size // 2 - 4) + b"]" * (size // 2 - 4) + b"}",
    }
    paths = {}
    for label, content in out.items():
        path = folder / (label.replace(" ", "_") + ".json")
        path.write_bytes(content)
        paths[label] = path
    return paths


def _largest_accepted(folder: Path) -> dict[str, Path]:
    """Audits at the bounds accepted without --large (4,000 examples, 80,000 examples x answers)."""
    out = {}
    for label, decisions in (
        ("2 decisions x 2,000 examples x 20 answers, groups", [
            with_groups(synthetic_decision(seed=i, n=2000, n_answers=20, name=f"d{i}"), [10] * 200)
            for i in range(2)]),
        ("2 decisions x 2,000 examples x 20 answers", [
            synthetic_decision(seed=i, n=2000, n_answers=20, name=f"d{i}") for i in range(2)]),
        ("1 decision x 312 examples x 256 answers", [
            synthetic_decision(seed=10, n=312, n_answers=256, name="d")]),
    ):
        audit = build_audit(judge(decisions, keep_if_loses=False), training_id="bench",
                            model_id="bench-model", jev_id="jev")
        name = "".join(c if c.isalnum() else "_" for c in label) + ".json"
        out[label] = write_audit(folder / name, audit)
    return out


def grouped_and_hostile() -> None:
    data = with_groups(synthetic_decision(seed=2026, n=N, n_answers=K, model_skill=0.8,
                                          jev_skill=0.6), [10] * 200)
    audit = build_audit(judge([data], keep_if_loses=False), training_id="bench",
                        model_id="bench-model", jev_id="jev")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _audit_folder(folder, audit)
        runs = [_run_verifier(folder, path.name) for _ in range(3)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        print(f"  group bootstrap audit (200 groups of 10, {path.stat().st_size / 1e6:.1f} MB): "
              f"python3 -I verify_audit.py: wall {wall:.2f} s, CPU {cpu:.2f} s, exit "
              f"{runs[0][2]} (target <= 2 s)")
        worst: tuple[float, float, str] = (0.0, 0.0, "")
        for label, file in {**_hostile_files(folder), **_largest_accepted(folder)}.items():
            wall, cpu, code = _run_verifier(folder, file.name)
            print(f"  {label} ({file.stat().st_size / 1e6:.1f} MB): exit {code}, wall {wall:.2f} s, "
                  f"CPU {cpu:.2f} s (bound: 5 s)")
            worst = max(worst, (cpu, wall, label))
        print(f"  worst input of at most 50 MB: {worst[2]}: CPU {worst[0]:.2f} s, wall "
              f"{worst[1]:.2f} s (bound: 5 s); load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
